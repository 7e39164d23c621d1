# embed_fatbin.cmake: write a C header holding a binary file as an 8-byte-aligned array (what
# cuModuleLoadData wants), for the driver-API hostile solution.
#   cmake -DIN=<file> -DOUT=<header> -DNAME=<symbol> -P embed_fatbin.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){24})" "\\1\n  " body "${body}")
file(WRITE "${OUT}" "// Generated from ${IN} by tests/hostile/embed_fatbin.cmake: do not edit.\n#pragma once\n"
                    "alignas(8) static const unsigned char ${NAME}[${bytes}] = {\n  ${body}\n};\n")
