#!/usr/bin/env python3
"""check_import.py: `nibble fixture import` on checkpoints written here, in numpy, in each format.

A decode tiny fixture built by nibble (seed 3) is written out as a Llama checkpoint the way each
format's tool would store it (config.json with its quantization_config, fp16 scales, fp16 dense
embedding and norms; the packing from check_int4_formats.py, which re-implements the formats from
their sources), one of them split into two shards with model.safetensors.index.json. Then:
  1. `nibble fixture import --path cpu` of each: every projection's codes, zero points and scales,
     and every norm gain, are the original fixture's bit for bit (bf16 -> fp16 -> bf16 is exact for
     these values); the tokens are the file's ids after the prefix; the manifest's source names the
     format, the checkpoint's and the token file's SHA-256; `nibble fixture verify` passes;
  2. the KV prefix against a forward pass written here in numpy (fp64, K and V rounded to bf16 as
     the cache stores them) of the imported weights over the same 64 prefix ids: every element
     within one bf16 step, the slots after the prefix zero;
  3. `nibble calibrate --fixture IMPORTED --path cpu`: a healthy table on the imported fixture;
  4. refusals, each exit 2 with a message: the format not the checkpoint's, too few ids, an id
     outside the vocabulary, an untied LM head, dimensions no config has, a NaN scale, a config
     field of the wrong type, GPTQ's sym or desc_act contradicted by its tensors, compressed-
     tensors symmetric with zero points, --out the checkpoint's own folder or one inside it; an int32 weight_shape
     is read as well as the int64 compressed-tensors writes; and an imported fixture whose
     manifest's source was edited or dropped fails `fixture verify`.
With --gpu (a GPU test; exit 77 where no GPU answers) instead: the AWQ checkpoint imported with
--path gpu (the KV prefix by the bundled fp32 reference) against the numpy pass (relative error
below 5e-3: fp32 against fp64, a rounding of the bf16 cache may flip), then the CPU-path import
graded with the megakernel and the reference: Passed, and the report names the fixture's source.
Exit 0 when all hold; 1 with what failed; 2 without numpy/safetensors.
usage: check_import.py --nibble build/bin/nibble [--gpu --lib build/lib]
"""
import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    from safetensors.numpy import save_file
except ImportError as e:  # pragma: no cover
    print(f"check_import.py: {e}. numpy and safetensors are required: run scripts/setup.sh", file=sys.stderr)
    sys.exit(2)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_int4_formats import pack_awq, pack_ct, pack_gptq, plain_codes  # noqa: E402

TASK = "megakernel-int4-weight-decode"
CFG = dict(layers=2, d=256, ffn=512, n_q=4, n_kv=2, hd=64, vocab=1000, group=128, max_seq=256, prefill=64, steps=32,
           eps=1e-5, theta=500000.0)
PROJ = [("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"), ("v", "self_attn.v_proj"), ("o", "self_attn.o_proj"),
        ("gate", "mlp.gate_proj"), ("up", "mlp.up_proj"), ("down", "mlp.down_proj")]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def run(cmd, expect=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != expect:
        fail(f"{' '.join(cmd[:4])} ...: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def load(path):
    """name -> (dtype, shape, raw bytes) through the safetensors package's own parser."""
    with open(path, "rb") as f:
        return {k: (v["dtype"], v["shape"], bytes(v["data"])) for k, v in safetensors.deserialize(f.read())}


def arr(t, dtype):
    return np.frombuffer(t[2], dtype=dtype).reshape(t[1])


def bf16_to_f64(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_bf16(x):
    """fp64 -> nearest bf16 (through fp32, ties to even), as fp64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return bf16_to_f64(u.astype(np.uint16))


def dequant(fx, name):
    codes = plain_codes(arr(fx[name + ".packed"], np.uint8)).astype(np.float64)
    zero = arr(fx[name + ".zero"], np.uint8).astype(np.float64)
    scale = bf16_to_f64(arr(fx[name + ".scale"], np.uint16))
    g = CFG["group"]
    return (codes - np.repeat(zero, g, axis=1)) * np.repeat(scale, g, axis=1)


def write_checkpoint(fx, folder, fmt, shards=1, untied=False, vocab=None, edit=None):
    os.makedirs(folder)
    qc = {"awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
          "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": False,
                   "checkpoint_format": "gptq"},
          "compressed-tensors": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                 "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                     "num_bits": 4, "type": "int", "symmetric": False, "strategy": "group",
                                     "group_size": 128}}}, "ignore": ["lm_head"]}}[fmt]
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": CFG["d"],
              "intermediate_size": CFG["ffn"], "num_hidden_layers": CFG["layers"], "num_attention_heads": CFG["n_q"],
              "num_key_value_heads": CFG["n_kv"], "head_dim": CFG["hd"], "vocab_size": vocab or CFG["vocab"],
              "rms_norm_eps": CFG["eps"], "rope_theta": CFG["theta"], "tie_word_embeddings": not untied,
              "rope_scaling": {"rope_type": "llama3", "factor": 32.0}, "torch_dtype": "float16",
              "quantization_config": qc}
    t = {}
    if edit:
        edit(config, t)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    f16 = lambda bits: bf16_to_f64(bits).astype(np.float16)  # noqa: E731 (exact for these values)
    t["model.embed_tokens.weight"] = dequant(fx, "embed").astype(np.float16)
    if untied:
        t["lm_head.weight"] = t["model.embed_tokens.weight"].copy()
    t["model.norm.weight"] = f16(arr(fx["final_norm"], np.uint16))
    for i in range(CFG["layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = f16(arr(fx[f"layers.{i}.in_norm"], np.uint16))
        t[p + "post_attention_layernorm.weight"] = f16(arr(fx[f"layers.{i}.post_norm"], np.uint16))
        for ours, hf in PROJ:
            n = f"layers.{i}.{ours}"
            codes = plain_codes(arr(fx[n + ".packed"], np.uint8))
            zeros = arr(fx[n + ".zero"], np.uint8).astype(np.int64)
            scale = f16(arr(fx[n + ".scale"], np.uint16)).view(np.uint16)
            h = p + hf + "."
            if fmt == "awq":
                qw, qz, sc = pack_awq(codes, zeros, scale)
                t[h + "qweight"], t[h + "qzeros"], t[h + "scales"] = qw, qz, sc.view(np.float16)
            elif fmt == "gptq":
                assert zeros.min() >= 1, "GPTQ v1 cannot store a zero point of 0"
                qw, qz, sc = pack_gptq(codes, zeros, scale)
                t[h + "qweight"], t[h + "qzeros"], t[h + "scales"] = qw, qz, sc.view(np.float16)
                t[h + "g_idx"] = (np.arange(codes.shape[1]) // 128).astype(np.int32)
            else:
                wp, ws, wz, shape = pack_ct(codes, zeros, scale)
                t[h + "weight_packed"], t[h + "weight_scale"] = wp, ws.view(np.float16)
                t[h + "weight_zero_point"], t[h + "weight_shape"] = wz, shape
    if edit:
        edit(None, t)  # a second pass over the tensors, now written
    t = {k: np.ascontiguousarray(v) for k, v in t.items()}
    names = sorted(t)
    if shards == 1:
        save_file(t, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        return
    parts = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for k, part in enumerate(parts):
        fname = f"model-0000{k + 1}-of-00002.safetensors"
        save_file({n: t[n] for n in part}, os.path.join(folder, fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def rope(x, pos):
    hd = x.shape[-1]
    half = hd // 2
    inv = CFG["theta"] ** (-2.0 * np.arange(half) / hd)
    a = pos * inv
    c, s = np.cos(a), np.sin(a)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def forward_kv(fx, ids):
    """K and V caches (layers, n_kv, slots, hd) after the prefix, numpy fp64, bf16 cache."""
    L, d, nq, nkv, hd = CFG["layers"], CFG["d"], CFG["n_q"], CFG["n_kv"], CFG["hd"]
    W = {f"layers.{i}.{p}": dequant(fx, f"layers.{i}.{p}") for i in range(L) for p, _ in PROJ}
    emb = dequant(fx, "embed")
    g = {n: bf16_to_f64(arr(fx[n], np.uint16)) for n in fx if n.endswith("_norm")}
    K = np.zeros((L, nkv, len(ids), hd))
    V = np.zeros_like(K)
    norm = lambda x, gain: x * gain / np.sqrt(np.mean(x * x) + CFG["eps"])  # noqa: E731
    for pos, tok in enumerate(ids):
        h = emb[tok].copy()
        for i in range(L):
            w = lambda p: W[f"layers.{i}.{p}"]  # noqa: E731
            x = norm(h, g[f"layers.{i}.in_norm"])
            q = rope((w("q") @ x).reshape(nq, hd), pos)
            K[i, :, pos] = round_bf16(rope((w("k") @ x).reshape(nkv, hd), pos))
            V[i, :, pos] = round_bf16((w("v") @ x).reshape(nkv, hd))
            att = np.empty((nq, hd))
            for j in range(nq):
                kv = j // (nq // nkv)
                s = K[i, kv, : pos + 1] @ q[j] / np.sqrt(hd)
                p = np.exp(s - s.max())
                att[j] = (p / p.sum()) @ V[i, kv, : pos + 1]
            h = h + w("o") @ att.reshape(-1)
            x = norm(h, g[f"layers.{i}.post_norm"])
            gt = w("gate") @ x
            h = h + w("down") @ ((gt / (1 + np.exp(-gt))) * (w("up") @ x))
    return K, V


def gpu_checks(nb, lib, fx, tmp, tokens, ids):
    ck = os.path.join(tmp, "ckpt-awq")
    write_checkpoint(fx, ck, "awq")
    outs = {}
    for path in ("gpu", "cpu"):
        outs[path] = os.path.join(tmp, "imported-" + path)
        run([nb, "fixture", "import", "--format", "awq", ck, "--tokens", tokens, "--out", outs[path], "--path", path])
    if failures:
        return 1
    im = load(os.path.join(outs["gpu"], "model.safetensors"))
    K, V = forward_kv(im, ids[: CFG["prefill"]])
    num = den = 0.0
    for i in range(CFG["layers"]):
        for which, want in (("k", K), ("v", V)):
            got = bf16_to_f64(arr(im[f"kv.{i}.{which}"], np.uint16))[0][:, : CFG["prefill"]]
            num += float(((got - want[i]) ** 2).sum())
            den += float((want[i] ** 2).sum())
    rel = (num / den) ** 0.5
    if not rel < 5e-3:
        fail(f"gpu path: the KV prefix is {rel:.2e} (relative) off the numpy forward pass")
    print(f"gpu path: KV prefix {rel:.2e} relative to numpy")
    if "kv_prefix" not in json.load(open(os.path.join(outs["gpu"], "manifest.json")))["source"]:
        fail("gpu path: the manifest does not say how the prefix was computed")
    for so in ("libnibble_megakernel.so", "libnibble_reference.so"):
        rep = os.path.join(tmp, so + ".json")
        run([nb, "grade", "--fixture", outs["cpu"], "--solution", os.path.join(lib, so), "--no-timing", "--out", rep, "-q"])
        if not os.path.exists(rep):
            continue
        r = json.load(open(rep))
        f0 = (r.get("fixtures") or [{}])[0]
        if r.get("disposition") != "Passed":
            fail(f"{so} on the imported fixture: {r.get('disposition')}: {r.get('reason')}")
        if f0.get("source", {}).get("format") != "awq" or not str(f0.get("trust", "")).startswith("imported"):
            fail(f"{so}: the report does not name the imported fixture's source: {json.dumps(f0)[:400]}")
        print(f"{so} on the imported fixture: {r.get('disposition')}, worst error {r.get('correctness', {}).get('worst_rel_err')}")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nibble", required=True)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--lib", help="the folder of the bundled .so's (--gpu)")
    args = ap.parse_args()
    nb = args.nibble
    if args.gpu:
        if not shutil.which("nvidia-smi") or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0:
            print("SKIP: no GPU answers (nvidia-smi -L): the GPU import and grade need one")
            return 77
    with tempfile.TemporaryDirectory(prefix="nibble-import-") as tmp:
        env_cache = os.path.join(tmp, "cache")
        os.environ["NIBBLE_CACHE_DIR"] = env_cache
        src = os.path.join(tmp, "seed3")
        run([nb, "fixture", "build", "--task", TASK, "--config", "tiny", "--seed", "3", "--out", src, "-q"])
        fx = load(os.path.join(src, "model.safetensors"))
        rng = np.random.default_rng(7)
        ids = [int(v) for v in rng.integers(0, CFG["vocab"], CFG["prefill"] + CFG["steps"] + 5)]
        tokens = os.path.join(tmp, "tokens.txt")
        with open(tokens, "w") as f:
            f.write(" ".join(map(str, ids[:50])) + ",\n" + ",".join(map(str, ids[50:])) + "\n")
        if args.gpu:
            return gpu_checks(nb, args.lib, fx, tmp, tokens, ids)
        for fmt, shards in (("awq", 1), ("gptq", 2), ("compressed-tensors", 1)):
            ck = os.path.join(tmp, "ckpt-" + fmt)
            write_checkpoint(fx, ck, fmt, shards)
            out = os.path.join(tmp, "imported-" + fmt)
            p = run([nb, "fixture", "import", "--format", fmt, ck, "--tokens", tokens, "--out", out, "--path", "cpu"])
            if p.returncode != 0:
                continue
            im = load(os.path.join(out, "model.safetensors"))
            same = [n for n in fx if not n.startswith(("kv.", "embed.")) and n != "tokens"]
            for n in same:
                if im[n][2] != fx[n][2]:
                    fail(f"{fmt}: {n} differs from the original fixture's")
            got_tokens = arr(im["tokens"], np.int64).reshape(-1).tolist()
            if got_tokens != ids[CFG["prefill"]: CFG["prefill"] + CFG["steps"]]:
                fail(f"{fmt}: tokens {got_tokens[:5]}... are not the file's ids after the prefix")
            emb_err = np.abs(dequant(im, "embed") - dequant(fx, "embed")).max()
            if not emb_err < 0.05:
                fail(f"{fmt}: the re-quantised embedding is {emb_err} off the checkpoint's")
            m = json.load(open(os.path.join(out, "manifest.json")))
            s = m.get("source", {})
            if s.get("kind") != "import" or s.get("format") != fmt or len(s.get("checkpoint_sha256", "")) != 64:
                fail(f"{fmt}: manifest source {json.dumps(s)[:300]}")
            if s.get("tokens", {}).get("sha256") != hashlib.sha256(open(tokens, "rb").read()).hexdigest():
                fail(f"{fmt}: the manifest's token file SHA-256 is not the file's")
            if not any("rope_scaling" in n for n in s.get("notes", [])):
                fail(f"{fmt}: the manifest does not say rope_scaling is not part of the task")
            if any("were not read" in n for n in s.get("notes", [])):
                fail(f"{fmt}: an honest checkpoint has tensors the import did not read: {s.get('notes')}")
            # Every file read is in the source, the shards' index too (which tensor is in which shard).
            want = sorted(f for f in os.listdir(ck) if f.endswith((".safetensors", ".json")))
            if sorted(f["file"] for f in s.get("files", [])) != want:
                fail(f"{fmt}: the source's files {[f['file'] for f in s.get('files', [])]} are not the checkpoint's {want}")
            run([nb, "fixture", "verify", out])
            # A build from a seed into the imported folder would destroy what no seed rebuilds.
            p = run([nb, "fixture", "build", "--task", TASK, "--config", m["config"], "--seed", str(m["seed"]), "--out", out,
                     "-q"], expect=2)
            if "holds an imported fixture" not in p.stdout + p.stderr:
                fail(f"{fmt}: fixture build over an imported fixture said {(p.stdout + p.stderr)[:300]}")
            K, V = forward_kv(im, ids[: CFG["prefill"]])  # the imported model: its embedding is re-quantised
            worst = 0.0
            for i in range(CFG["layers"]):
                for which, want in (("k", K), ("v", V)):
                    c = bf16_to_f64(arr(im[f"kv.{i}.{which}"], np.uint16))[0]  # (n_kv, max_seq, hd)
                    got, exp = c[:, : CFG["prefill"]], want[i]
                    ulp = np.maximum(np.abs(exp), 1e-30) * 2.0 ** -7
                    worst = max(worst, float((np.abs(got - exp) / ulp).max()))
                    if np.any(c[:, CFG["prefill"]:] != 0):
                        fail(f"{fmt}: kv.{i}.{which} slots after the prefix are not zero")
            if worst > 1.0:
                fail(f"{fmt}: the KV prefix is {worst:.2f} bf16 steps off the numpy forward pass")
            print(f"{fmt}: imported; weights exact, KV prefix within {worst:.3f} bf16 steps of numpy")
            cal = os.path.join(tmp, f"cal-{fmt}.json")
            run([nb, "calibrate", "--fixture", out, "--path", "cpu", "--out", cal, "-q"])
            if os.path.exists(cal):
                t = json.load(open(cal))
                if not all(r.get("healthy") for r in t.get("rows", [])) or not t.get("rows"):
                    fail(f"{fmt}: calibrate on the imported fixture is not healthy")
                if t.get("fixtures", [{}])[0].get("source", {}).get("format") != fmt:
                    fail(f"{fmt}: the calibration table does not name the imported fixture's source")
        # Refusals of bad checkpoints, each written here with one thing wrong.
        def nan_scale(cfg, t):
            if cfg is None:
                t["model.layers.0.self_attn.q_proj.scales"][0, 3] = np.float16("nan")

        def eps_string(cfg, t):
            if cfg is not None:
                cfg["rms_norm_eps"] = "1e-5"

        def sym_gptq(cfg, t):
            if cfg is not None:
                cfg["quantization_config"]["sym"] = True

        def desc_act(cfg, t):
            if cfg is None:
                for k in [k for k in t if k.endswith("g_idx")]:
                    del t[k]
            else:
                cfg["quantization_config"]["desc_act"] = True

        def ct_sym_with_zeros(cfg, t):
            if cfg is not None:
                cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = True

        def ct_shape_int32(cfg, t):
            if cfg is None:
                for k in [k for k in t if k.endswith("weight_shape")]:
                    t[k] = t[k].astype(np.int32)
        def embed_overflows_bf16(cfg, t):
            if cfg is None:
                e = t["model.embed_tokens.weight"].astype(np.float32)
                e[5, 0], e[5, 1] = 3.3e38, -3.3e38  # finite in fp32, a group range no bf16 scale holds
                t["model.embed_tokens.weight"] = e

        def ct_actorder(cfg, t):
            if cfg is not None:
                cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["actorder"] = "group"
        for what, fmt, edit, text in (("NaN scale", "awq", nan_scale, "not a usable scale"),
                                      ("embedding overflowing bf16", "awq", embed_overflows_bf16, "overflows"),
                                      ("ct act-order", "compressed-tensors", ct_actorder, "act-order"),
                                      ("eps as a string", "awq", eps_string, "rms_norm_eps"),
                                      ("gptq sym with zeros not 8", "gptq", sym_gptq, "symmetric"),
                                      ("desc_act without g_idx", "gptq", desc_act, "g_idx"),
                                      ("ct symmetric with zero points", "compressed-tensors", ct_sym_with_zeros, "symmetric")):
            ck = os.path.join(tmp, "bad-" + what.replace(" ", "_"))
            write_checkpoint(fx, ck, fmt, edit=edit)
            p = run([nb, "fixture", "import", "--format", fmt, ck, "--tokens", tokens, "--out", ck + "-out", "--path", "cpu",
                     "-q"], expect=2)
            if text not in p.stderr:
                fail(f"refusal '{what}': the message does not say '{text}': {p.stderr.strip()}")
        # A tensor of a layer beyond num_hidden_layers is not read, and the manifest says so.
        def extra_layer(cfg, t):
            if cfg is None:
                t["model.layers.99.extra.weight"] = np.zeros((2,), np.float16)
        ck = os.path.join(tmp, "extra-layer")
        write_checkpoint(fx, ck, "awq", edit=extra_layer)
        run([nb, "fixture", "import", "--format", "awq", ck, "--tokens", tokens, "--out", ck + "-out", "--path", "cpu", "-q"])
        notes = json.load(open(os.path.join(ck + "-out", "manifest.json")))["source"]["notes"]
        if not any("1 tensor(s) of the checkpoint were not read (model.layers.99.extra.weight)" in n for n in notes):
            fail(f"a tensor beyond the config's layers: the manifest's notes {notes}")
        ck = os.path.join(tmp, "ct-int32-shape")  # an int32 weight_shape is read as well as compressed-tensors' int64
        write_checkpoint(fx, ck, "compressed-tensors", edit=ct_shape_int32)
        run([nb, "fixture", "import", "--format", "compressed-tensors", ck, "--tokens", tokens, "--out", ck + "-out",
             "--path", "cpu", "-q"])
        # The output folder: never the checkpoint's, never a folder with files in it.
        awq = os.path.join(tmp, "ckpt-awq")
        before = hashlib.sha256(open(os.path.join(awq, "model.safetensors"), "rb").read()).hexdigest()
        p = run([nb, "fixture", "import", "--format", "awq", awq, "--tokens", tokens, "--out", awq, "--path", "cpu"], expect=2)
        if "not empty" not in p.stderr or hashlib.sha256(open(os.path.join(awq, "model.safetensors"), "rb").read()).hexdigest() != before:
            fail(f"--out the checkpoint's folder: {p.stderr.strip()}")
        sub = os.path.join(awq, "fixture")
        p = run([nb, "fixture", "import", "--format", "awq", awq, "--tokens", tokens, "--out", sub, "--path", "cpu"], expect=2)
        if "inside the checkpoint's folder" not in p.stderr or os.path.exists(sub):
            fail(f"--out a folder inside the checkpoint's: {p.stderr.strip()}")
        # A model.safetensors beside an index of other shards: which is the checkpoint is not guessed.
        both = os.path.join(tmp, "ckpt-gptq")
        shutil.copy(os.path.join(awq, "model.safetensors"), os.path.join(both, "model.safetensors"))
        p = run([nb, "fixture", "import", "--format", "gptq", both, "--tokens", tokens, "--out", both + "-both", "--path",
                 "cpu"], expect=2)
        if "has both model.safetensors and an index" not in p.stderr:
            fail(f"model.safetensors beside an index: {p.stderr.strip()}")
        os.remove(os.path.join(both, "model.safetensors"))
        # An import killed mid-way leaves only its staging file: the next import into that folder proceeds.
        left = os.path.join(tmp, "killed-import")
        os.makedirs(left)
        open(os.path.join(left, ".import-staging.safetensors"), "wb").write(b"partial")
        run([nb, "fixture", "import", "--format", "awq", awq, "--tokens", tokens, "--out", left, "--path", "cpu", "-q"])
        # A changed byte in an imported fixture: the advice is the import command, not a seed's rebuild.
        with open(os.path.join(left, "model.safetensors"), "r+b") as f:
            f.seek(-1, 2)
            last = f.read(1)
            f.seek(-1, 2)
            f.write(bytes([last[0] ^ 1]))
        p = run([nb, "fixture", "verify", left], expect=1)
        if "import it again, `nibble fixture import --format awq " + awq not in p.stderr or "fixture build" in p.stderr:
            fail(f"a changed imported fixture: {p.stderr.strip()}")
        # ... but not while another nibble holds the folder's lock (two imports at once each reported a
        # fixture and left one): the second is refused and the folder's lock file is all it touched.
        busy = os.path.join(tmp, "busy-import")
        os.makedirs(busy)
        with open(os.path.join(busy, ".nibble.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            p = run([nb, "fixture", "import", "--format", "awq", awq, "--tokens", tokens, "--out", busy, "--path", "cpu"],
                    expect=2)
            if "another nibble is writing a fixture into it" not in p.stderr or os.listdir(busy) != [".nibble.lock"]:
                fail(f"an import into a locked folder: {p.stderr.strip()} {os.listdir(busy)}")
        # An imported fixture's source is covered by its file's hash: an edited source is refused.
        imported = os.path.join(tmp, "imported-awq")
        man = os.path.join(imported, "manifest.json")
        m = json.load(open(man))
        m["source"]["format"] = "gptq"
        json.dump(m, open(man, "w"))
        p = run([nb, "fixture", "verify", imported], expect=1)
        if "source is not the one" not in p.stderr:
            fail(f"an edited source: {p.stderr.strip()}")
        del m["source"]
        json.dump(m, open(man, "w"))
        p = run([nb, "fixture", "verify", imported], expect=1)
        if "no source" not in p.stderr:
            fail(f"a dropped source: {p.stderr.strip()}")
        # Refusals of bad command lines.
        for what, cmd, text in (
                ("unknown config", ["--format", "awq", awq, "--tokens", tokens, "--config", "bogus"],
                 "unknown config 'bogus' for task megakernel-int4-weight-decode"),
                ("an id left out", ["--format", "awq", awq, "--tokens", os.path.join(tmp, "gap.txt")],
                 "two commas in a row after entry 0 (id 5): an id is missing"),
                ("a stream as the folder", ["--format", "awq", awq, "--tokens", tokens], "a fixture is a folder, not a stream"),
                ("wrong format", ["--format", "gptq", awq, "--tokens", tokens], "quant_method"),
                ("too few ids", ["--format", "awq", awq, "--tokens", os.path.join(tmp, "few.txt")], "needs 96"),
                ("id outside the vocabulary", ["--format", "awq", awq, "--tokens", os.path.join(tmp, "big.txt")],
                 "outside the vocabulary"),
                # Past the ids the import uses: still another tokenizer's.
                ("an unused id outside the vocabulary", ["--format", "awq", awq, "--tokens", os.path.join(tmp, "tail.txt")],
                 "id 1000 (entry 96, after the 96 the import uses) is outside the vocabulary"),
                ("untied head", ["--format", "awq", os.path.join(tmp, "untied"), "--tokens", tokens], "lm_head"),
                ("no config", ["--format", "awq", os.path.join(tmp, "vocab999"), "--tokens", tokens], "no decode config"),
                # Another model in Llama's tensor names (Mistral: sliding-window attention), said as such.
                ("a Mistral config", ["--format", "awq", os.path.join(tmp, "mistral"), "--tokens", tokens],
                 'model_type "mistral"'),
                ("two architectures", ["--format", "awq", os.path.join(tmp, "two-arch"), "--tokens", tokens],
                 'is not a Llama model'),
                # Shards without their index are not read as a checkpoint by guessing.
                ("shards without an index", ["--format", "awq", os.path.join(tmp, "no-index"), "--tokens", tokens],
                 "but no model.safetensors.index.json")):
            if what == "too few ids":
                open(cmd[4], "w").write("1 2 3")
            if what == "an id left out":
                open(cmd[4], "w").write("5,,6," + ",".join(["5"] * 98))
            if what == "id outside the vocabulary":
                open(cmd[4], "w").write(" ".join(["5"] * 90 + ["1000"] * 10))
            if what == "an unused id outside the vocabulary":
                open(cmd[4], "w").write(" ".join(["5"] * 96 + ["1000"]))
            if what == "untied head":
                write_checkpoint(fx, cmd[2], "awq", untied=True)
            if what == "no config":
                write_checkpoint(fx, cmd[2], "awq", vocab=999)
            if what == "a Mistral config":
                write_checkpoint(fx, cmd[2], "awq", edit=lambda c, t: c is not None and c.update(model_type="mistral"))
            if what == "two architectures":
                write_checkpoint(fx, cmd[2], "awq", edit=lambda c, t: c is not None and c.update(
                    architectures=["LlamaForCausalLM", "MistralForCausalLM"]))
            if what == "shards without an index":
                write_checkpoint(fx, cmd[2], "awq", shards=2)
                os.remove(os.path.join(cmd[2], "model.safetensors.index.json"))
            out = "-" if what == "a stream as the folder" else os.path.join(tmp, "refused-" + what.replace(" ", "_"))
            p = run([nb, "fixture", "import"] + cmd + ["--out", out, "--path", "cpu"], expect=2)
            if text not in p.stderr:
                fail(f"refusal '{what}': the message does not say '{text}': {p.stderr.strip()}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("fixture import: every format imported exactly, KV prefix matches numpy, calibrate healthy, refusals clear")
    return 0


if __name__ == "__main__":
    sys.exit(main())
