# probe_pc_stalls_check.cmake: probe_pc_stalls --from-csv (-DBIN=..., -DDATA=tests/data/pc_stalls) on
# a hand-made file whose tables are known: reasons' shares of the R counts (barrier 30, long_scoreboard
# 50, selected 20 of 100; barrier_not_issued 10 shown beside barrier, not counted), the PCs by
# samples (0x20: 70, 0x10: 30), a zero row listed nowhere; and a malformed file is exit 2 naming its
# line.
execute_process(COMMAND ${BIN} --from-csv ${DATA}/tiny.csv --top 5 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--from-csv tiny.csv exited ${rc}: ${err}")
endif()
foreach(want "samples: 100 in PC records"
             "  long_scoreboard +50 +50.0% +0\n  barrier +30 +30.0% +10\n  selected +20 +20.0% +0\n"
             "k \\(100 samples, 100.0%\\)"
             "  k +0x000020 +70 +70.0%  long_scoreboard 50, selected 20\n  k +0x000010 +30 +30.0%  barrier 30\n")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "--from-csv tiny.csv: no match for \"${want}\" in:\n${out}")
  endif()
endforeach()
if(out MATCHES "wait|j \\(|0x000030")
  message(FATAL_ERROR "--from-csv tiny.csv: a row of 0 samples was shown:\n${out}")
endif()
execute_process(COMMAND ${BIN} --from-csv ${DATA}/bad.csv RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "bad.csv:2: \"k,0x10,barrier,30\" is not function,pc_offset,reason,samples")
  message(FATAL_ERROR "--from-csv bad.csv: exit ${rc}, expected 2 naming line 2; stderr: ${err}")
endif()
message(STATUS "probe_pc_stalls --from-csv: tables as worked by hand, a malformed line refused")
