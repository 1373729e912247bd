#!/usr/bin/env python3
"""Writes the measured sections of docs/simulator.md from scripts/simulator_validation.sh's
raw outputs. Usage: simulator_report.py WORK_DIR docs/simulator.md THREADS

Each generated block sits between `<!-- NAME: written by scripts/simulator_report.py -->` and
`<!-- end NAME -->`; everything outside those markers (the prose) is left as it is."""
import datetime
import json
import os
import platform
import re
import sys


def read(path):
    with open(path) as f:
        return f.read()


def cpu_name():
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def number(pattern, text, default=None):
    m = re.search(pattern, text)
    if not m:
        if default is not None:
            return default
        raise SystemExit(f"simulator_report: '{pattern}' not found in:\n{text}")
    return float(m.group(1))


def parse_calm(text):
    """The bench's numbers on the clock that stops while its stepping thread waits for a core
    (tools/bench.cc, runs with every request at t = 0); None from older binaries."""
    m = re.search(r"Without the waits for a core: elapsed ([\d.]+) s, ([\d.]+) requests/s; TTFT "
                  r"ms p50 ([\d.]+); time per output token ms p50 ([\d.]+); inter-token latency "
                  r"ms p50 ([\d.]+)", text)
    if not m:
        return None
    v = [float(x) for x in m.groups()]
    return {"elapsed": v[0], "req_s": v[1], "ttft_p50": v[2] / 1e3, "tpot_p50": v[3] / 1e3,
            "itl_p50": v[4] / 1e3}


def parse_bench(text):
    """The numbers `kvserve bench throughput` prints (tools/bench.cc)."""
    tiers = {}
    for m in re.finditer(r"tier (\w+): (\d+) hits, (\d+) bytes loaded, (\d+) stores", text):
        tiers[m.group(1)] = {"hits": int(m.group(2)), "bytes_loaded": int(m.group(3)),
                             "stores": int(m.group(4))}
    hits = number(r"prefix cache: (\d+) of", text)
    queries = number(r"prefix cache: \d+ of (\d+) tokens", text)
    return {
        "req_s": number(r"Throughput: ([\d.]+) requests/s", text),
        "out_tok_s": number(r"([\d.]+) output tokens/s", text),
        "elapsed": number(r"Elapsed ([\d.]+) s", text),
        "ttft_p50": number(r"TTFT ms: mean [\d.]+ p50 ([\d.]+)", text) / 1e3,
        "tpot_p50": number(r"time per output token ms: p50 ([\d.]+)", text) / 1e3,
        "itl_p50": number(r"Inter-token latency ms: p50 ([\d.]+)", text) / 1e3,
        "preemptions": int(number(r"preemptions (\d+)", text)),
        "hit": hits / queries if queries else 0.0,
        "steps": int(number(r"generated \d+ steps (\d+)", text)),
        "tiers": tiers,
        # The stepping thread's time waiting for a core and idle (tools/bench.cc; absent in
        # older binaries).
        "waiting": number(r"([\d.]+) s waiting for a core", text, -1.0),
        "calm": parse_calm(text),
        "idle": number(r"([\d.]+) s idle", text, -1.0),
        "cpu": number(r"cpu_time [\d.]+ ([\d.]+)", text) + number(r"cpu_time [\d.]+ [\d.]+ ([\d.]+)", text),
        "wall": number(r"cpu_time ([\d.]+)", text),
        "load": (number(r"load_before ([\d.]+)", text), number(r"load_after ([\d.]+)", text)),
    }


def parse_sim(j):
    s, c = j["summary"], j["counts"]
    q = c["prefix_query_tokens"]
    return {
        "req_s": s["requests_per_s"],
        "out_tok_s": s["output_tokens_per_s"],
        "elapsed": s["elapsed_s"],
        "ttft_p50": s["ttft_s"]["p50"],
        "tpot_p50": s["tpot_s"]["p50"],
        "itl_p50": s["itl_s"]["p50"],
        "preemptions": s["preemptions"],
        "hit": c["prefix_hit_tokens"] / q if q else 0.0,
        "steps": c["steps"],
        "tiers": {t["tier"]: t for t in j["tiers"]},
    }


def err(pred, meas):
    return (pred - meas) / meas * 100 if meas else 0.0


def calibration_section(work, threads):
    text = read(os.path.join(work, "calibration.txt"))
    grid_text, _, engine_text = text.partition("Engine overhead")
    table = [l for l in grid_text.splitlines() if l.startswith("|")]
    engine_table = [l for l in engine_text.splitlines() if l.startswith("|")]
    rms = number(r"RMS log error ([\d.]+)", text)
    profile = json.load(open(os.path.join(work, "cpu.json")))
    rates = [
        f"GEMM {profile['peak_flops']['default'] / 1e9:.1f} GFLOP/s",
        f"memory {profile['memory_bandwidth'] / 1e9:.1f} GB/s",
        f"attention {profile['attention_flops'] / 1e9:.1f} GFLOP/s and "
        f"{profile['attention_bandwidth'] / 1e9:.1f} GB/s",
        f"sampling {profile['sampling_rate'] / 1e6:.0f} M logits/s",
        f"overheads {profile['step_overhead'] * 1e6:.1f} us per step, "
        f"{profile['sequence_overhead'] * 1e6:.2f} us per sequence, "
        f"{profile['token_overhead'] * 1e6:.2f} us per token",
        f"the engine's own work {profile.get('engine_step_overhead', 0) * 1e6:.1f} us per step, "
        f"{profile.get('engine_sequence_overhead', 0) * 1e6:.2f} us per sequence, "
        f"{profile.get('engine_token_overhead', 0) * 1e6:.3f} us per token",
        f"KV footprint: {profile.get('cached_kv_bytes', 0) / 2**20:.1f} MiB cached between steps, "
        f"{profile.get('kv_spill_bandwidth', 0) / 1e9:.1f} GB/s beyond",
        f"CPU tier {profile['cpu_tier']['bandwidth'] / 1e9:.2f} GB/s + "
        f"{profile['cpu_tier']['latency'] * 1e6:.1f} us",
        f"file tier {profile['file_tier']['bandwidth'] / 1e9:.2f} GB/s + "
        f"{profile['file_tier']['latency'] * 1e6:.1f} us",
    ]
    before = number(r"load_before ([\d.]+)", text)
    after = number(r"load_after ([\d.]+)", text)
    out = [
        f"Measured {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC on {cpu_name()} "
        f"({os.cpu_count()} cores, shared with other engineers' builds and tests: load average "
        f"{before:.1f} before, {after:.1f} after), {threads} thread(s), the `tiny` "
        "preset (`kvserve make-model --preset tiny`: llama, 4 layers, 128 wide, f32).",
        "",
        "| shape | measured ms | fitted ms |",
        "|---|---|---|",
        *table[2:],
        "",
        f"RMS log error of the fit: {rms:.3f}. Fitted rates: " + "; ".join(rates) + ".",
    ]
    if engine_table:
        out += ["", "The engine's own work per step (`Engine::Step` less its forward pass and "
                "the sampler work the grid times; the median step of each shape; `fitted`: the "
                "fitted profile's forward + sampler time for the same batch):", "",
                "| engine step | step ms | forward + sampler ms | fitted ms | extra ms | "
                "fitted extra ms |", "|---|---|---|---|---|---|", *engine_table[2:]]
    return "\n".join(out)


def cpu_share(b, flags, threads):
    """The fraction of the run's elapsed time the one stepping thread was not kept from a core:
    1 - (time it was ready to run but waited for a core) / elapsed, from the bench's own
    schedstat line. The undisturbed run would have been that much faster. This counts only the
    engine thread: the file tier's read and write threads run beside it and do not inflate it
    (the process's CPU time / wall time did: 115% in the tiers workload), and time it slept
    waiting for a tier load is the run's own, not a disturbance. Older binaries: CPU time /
    wall time of the process. With --request-rate the bench sleeps between arrivals on the
    wall clock (arrivals would not have come sooner): no correction; with several threads the
    workers spin between steps and stall at each other's barriers: none either."""
    if "--request-rate" in flags or threads != "1":
        return 1.0
    if b["waiting"] >= 0:
        return 1.0 - b["waiting"] / b["elapsed"]
    return b["cpu"] / b["wall"]


def validation_section(work, threads):
    """Two tables: the times (measured, without the waits for a core, predicted) and the
    decisions (preemptions, hits, steps, tiers: measured / predicted)."""
    times, decisions, tier_rows = [], [], []
    for line in read(os.path.join(work, "workloads.txt")).splitlines():
        name, what, flags = line.split("|")
        b = parse_bench(read(os.path.join(work, f"{name}.bench.txt")))
        s = parse_sim(json.load(open(os.path.join(work, f"{name}.sim.json"))))
        flags = flags.replace("TIERS", "(CPU 2 MiB + fs)")
        share = cpu_share(b, flags, threads)

        def corrected_value(key, rate):
            """The measurement without the waits for a core: each token stamped on the clock
            that stops while the engine thread waits (as the bench prints it), else scaled by
            the share."""
            if b["calm"] and "--request-rate" not in flags and threads == "1":
                return b["calm"][key]
            return b[key] / share if rate else b[key] * share

        def cell(key, scale, fmt, rate=False):
            meas = b[key] * scale
            corrected = corrected_value(key, rate) * scale
            pred = s[key] * scale
            return (f"{fmt.format(meas)} / {fmt.format(corrected)} / {fmt.format(pred)} "
                    f"({err(pred, corrected):+.0f}%)")

        if not name.startswith("sliding-"):  # sliding-*: another model, decisions only
            misses = [label for label, key, rate, goal in (
                ("throughput", "req_s", True, 10), ("TTFT", "ttft_p50", False, 15),
                ("TPOT", "tpot_p50", False, 15))
                if abs(err(s[key], corrected_value(key, rate))) > goal]
            times.append(
                f"| {name} | {100 * share:.0f}% | {cell('req_s', 1, '{:.2f}', rate=True)} | "
                f"{cell('ttft_p50', 1e3, '{:.0f}')} | {cell('tpot_p50', 1e3, '{:.2f}')} | "
                f"{'misses ' + ', '.join(misses) if misses else 'met'} | "
                f"{b['load'][0]:.1f}-{b['load'][1]:.1f} |")
        decisions.append(
            f"| {name}: {what} | `{flags}` | {b['preemptions']} / {s['preemptions']} | "
            f"{100 * b['hit']:.2f}% / {100 * s['hit']:.2f}% | {b['steps']} / {s['steps']} |")
        for tier in sorted(set(b["tiers"]) | set(s["tiers"])):
            bt, st = b["tiers"].get(tier, {}), s["tiers"].get(tier, {})
            tier_rows.append(
                f"| {name} | {tier} | {bt.get('hits', 0)} / {st.get('hits', 0)} | "
                f"{bt.get('bytes_loaded', 0) / 2**20:.2f} / {st.get('bytes_loaded', 0) / 2**20:.2f} | "
                f"{bt.get('stores', 0)} / {st.get('stores', 0)} |")
    out = ["Decisions (measured / predicted):", "",
           "| workload | flags | preemptions | prefix hit | steps |", "|---|---|---|---|---|",
           *decisions]
    if tier_rows:
        out += ["", "| workload | tier | hits (blocks) | MiB loaded | stores (blocks) |",
                "|---|---|---|---|---|", *tier_rows]
    out += ["", "Times: measured / measured without the engine thread's waits for a core / "
            "predicted (error of the prediction against the middle number); `CPU share`: the "
            "fraction of the run the engine thread was not waiting for a core:", "",
            "| workload | CPU share | throughput req/s | TTFT p50 ms | TPOT p50 ms | goal | load |",
            "|---|---|---|---|---|---|---|", *times]
    return "\n".join(out)


def summary_row(label, s):
    return (f"| {label} | {s['requests_per_s']:.3f} | {s['output_tokens_per_s']:.0f} | "
            f"{s['ttft_s']['p50']:.2f} / {s['ttft_s']['p99']:.2f} | "
            f"{s['itl_s']['p50'] * 1e3:.1f} / {s['itl_s']['p99'] * 1e3:.1f} | "
            f"{s['tpot_s']['p50'] * 1e3:.1f} | {s['e2e_s']['p50']:.1f} | {s['preemptions']} | "
            f"{100 * s['prefix_hit_rate']:.1f}% | {100 * s['prefix_loaded_rate']:.2f}% | "
            f"{100 * s['peak_kv_usage']:.0f}% | {s['max_waiting']} |")


def seed_section(work):
    head = ("| run | req/s | out tok/s | TTFT p50 / p99 s | ITL p50 / p99 ms | TPOT p50 ms | "
            "E2E p50 s | preemptions | prefix hit | loaded from the CPU tier | peak KV | "
            "peak queue |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    out = []
    for name, title in (("seed-chunk", "Chunked prefill, 2,048 vs 8,192 tokens per step"),
                        ("seed-tier", "A CPU KV tier on shared prefixes")):
        runs = json.load(open(os.path.join(work, f"{name}.json")))
        out += [f"**{title}**: `kvserve simulate {read(os.path.join(work, name + '.cmd')).strip()}"
                f" --sweep {'max-num-batched-tokens=2048,8192' if name == 'seed-chunk' else 'kv-offloading-size=0,512'}`"
                f" ({runs[0]['knobs'][-1] if runs[0]['knobs'] else ''})", "", head]
        for r in runs:
            label = [k for k in r["knobs"] if k.startswith(
                "max-num-batched-tokens" if name == "seed-chunk" else "KV budget")]
            tiers = {t["tier"]: t for t in r["tiers"]}
            tag = label[0] if name == "seed-chunk" else (
                f"CPU tier {tiers['cpu']['usage_bytes'] / 2**30:.0f} GiB used" if "cpu" in tiers
                else "no CPU tier")
            out.append(summary_row(tag, r["summary"]))
        out.append("")
    speed = json.load(open(os.path.join(work, "speed.json")))
    wall, user = read(os.path.join(work, "speed.time")).split()[-2:]
    out += [
        f"**Speed**: `kvserve simulate {read(os.path.join(work, 'speed.cmd')).strip()}`: "
        f"{speed['summary']['requests']} requests, {speed['counts']['steps']} steps, "
        f"{speed['summary']['elapsed_s']:.0f} s of virtual time, simulated in {float(wall):.2f} s "
        f"wall ({float(user):.2f} s CPU) on the shared machine (target: under 60 s)."]
    return "\n".join(out)


def replace(doc, name, body):
    start = f"<!-- {name}: written by scripts/simulator_report.py -->"
    end = f"<!-- end {name} -->"
    if start not in doc:
        raise SystemExit(f"simulator_report: marker '{start}' missing from docs/simulator.md")
    if end in doc:
        a = doc.index(start)
        b = doc.index(end) + len(end)
        return doc[:a] + start + "\n" + body + "\n" + end + doc[b:]
    return doc.replace(start, start + "\n" + body + "\n" + end)


def main():
    work, doc_path, threads = sys.argv[1], sys.argv[2], sys.argv[3]
    doc = read(doc_path)
    suffix = "" if threads == "1" else f"-threads-{threads}"
    doc = replace(doc, "calibration" + suffix, calibration_section(work, threads))
    doc = replace(doc, "validation" + suffix, validation_section(work, threads))
    doc = replace(doc, "seed", seed_section(work))
    with open(doc_path, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
