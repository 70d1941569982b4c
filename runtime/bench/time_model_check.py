"""Predicted against measured step time: the time model checked on a device.

  python3 runtime/bench/time_model_check.py --lms target/release/lms --device cpu \
      --profile compiler/profiles/cpu-2core-measured.json --case mlp=fixtures/models/mlp.onnx:16 \
      --out time_model.md
  bash runtime/bench/gpu_session.sh measure         # on the GPU machine: measures the
                                                    # profile first, then runs this script

For each case (NAME=MODEL.onnx:BATCH) and each plan (plain; TFLMS and auto at a device budget of
--fraction of the plain graph's device arena), it compiles the model on the device profile
(`lms compile --device-profile`), takes the predicted step from `lms simulate --json`
(`predicted_step_seconds`, with its compute, host-to-device, device-to-host and stall parts), and
trains the plan with `lms run --device D --steps S --json`; the measured step is the median of
`step_seconds` after the first step (and of `step_cpu_seconds` on the CPU, where a loaded
machine makes wall time noise). A plan that does not fit its budget (`lms compile` exit 3) is
listed as such. Writes a markdown table (and, with --json, the same rows as JSON) naming the
device, the profile and the commands. Every figure comes from the runs; nothing is assumed.
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

DEFAULT_CASES = ["resnet50=.gpu/light_resnet50.onnx:64", "gpt2=.gpu/gpt2.onnx:8"]


def run(cmd, log):
    """Runs cmd, appending its command line and output to log; returns (exit code, stdout)."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(map(str, cmd)) + f"\n[exit {proc.returncode}]\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}\n")
    return proc.returncode, proc.stdout


def parse_case(text):
    name, _, rest = text.partition("=")
    model, _, batch = rest.rpartition(":")
    if not name or not model or not batch.isdigit():
        sys.exit(f"time_model_check: case {text!r} is not NAME=MODEL.onnx:BATCH")
    return name, pathlib.Path(model), int(batch)


def measure_plan(args, work, name, model, batch, strategy, budget):
    """Compiles, simulates and runs one plan; returns its row."""
    out = work / f"{name}_{strategy}.lms"
    report = work / f"{name}_{strategy}.json"
    cmd = [args.lms, "compile", model, "--batch", str(batch), "--train", args.train, "-o", out,
           "--report", report, "--device-profile", args.profile, "--no-verify", "-q"]
    if strategy != "plain":
        cmd += ["--strategy", strategy, "--budget", f"{budget}B", "--host-budget", args.host_budget]
    row = {"model": name, "batch": batch, "plan": strategy, "budget_device_bytes": budget}
    code, _ = run(cmd, args.log)
    if code != 0:
        row["error"] = "does not fit" if code == 3 else f"compile exit {code}"
        return row
    compiled = json.loads(report.read_text())
    code, text = run([args.lms, "simulate", out, "--json"], args.log)
    if code != 0:
        row["error"] = f"simulate exit {code}"
        return row
    sim = json.loads(text)
    row.update({
        "arena_device_bytes": compiled["arena_device_bytes"],
        "predicted_s": sim["predicted_step_seconds"],
        "compute_s": sim["compute_seconds"],
        "h2d_s": sim["h2d_seconds"],
        "d2h_s": sim["d2h_seconds"],
        "stall_s": sim["stall_seconds"],
    })
    code, text = run([args.lms, "run", out, "--device", args.device, "--steps", str(args.steps), "--json"], args.log)
    if code != 0:
        row["error"] = f"run exit {code}"
        return row
    ran = json.loads(text)
    row["measured_s"] = statistics.median(ran["step_seconds"][1:])
    if args.device == "cpu":
        row["measured_cpu_s"] = statistics.median(ran["step_cpu_seconds"][1:])
    row["ratio"] = row["predicted_s"] / row.get("measured_cpu_s", row["measured_s"])
    return row


def size(n):
    """Bytes as GiB from 1 GiB up, else MiB."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def table(rows, args):
    lines = [
        f"Device `{args.device}`, profile `{args.profile}`, {args.steps} steps per run (median after the first), "
        f"TFLMS and auto at {args.fraction} of the plain graph's device arena, host budget {args.host_budget}.",
        "",
        "| model | batch | plan | device budget | arena | predicted (ms) | compute / h2d / d2h / stall (ms) | measured (ms) | predicted / measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        budget = size(r["budget_device_bytes"]) if r["plan"] != "plain" else "—"
        if "predicted_s" not in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['plan']} | {budget} | {r['error']} | | | | |")
            continue
        parts = " / ".join(f"{r[k] * 1e3:.1f}" for k in ("compute_s", "h2d_s", "d2h_s", "stall_s"))
        measured = r.get("measured_cpu_s", r.get("measured_s"))
        shown = f"{measured * 1e3:.1f}" if measured is not None else r.get("error", "")
        if "measured_cpu_s" in r:
            shown += f" CPU ({r['measured_s'] * 1e3:.1f} wall)"
        ratio = f"{r['ratio']:.3f}" if "ratio" in r else ""
        lines.append(f"| {r['model']} | {r['batch']} | {r['plan']} | {budget} | "
                     f"{size(r['arena_device_bytes'])} | {r['predicted_s'] * 1e3:.1f} | {parts} | {shown} | {ratio} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lms", default="target/release/lms")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--profile", required=True, help="device profile file (lms profile -o)")
    p.add_argument("--case", action="append", help=f"NAME=MODEL.onnx:BATCH (default {DEFAULT_CASES})")
    p.add_argument("--strategies", default="plain,tflms,auto")
    p.add_argument("--fraction", type=float, default=0.5, help="budget of TFLMS and auto over the plain arena")
    p.add_argument("--host-budget", default="64GiB")
    p.add_argument("--train", default="sgd")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--out", type=pathlib.Path, required=True, help="markdown table")
    p.add_argument("--json", type=pathlib.Path)
    p.add_argument("--log", type=pathlib.Path, help="commands and their output (default: beside --out)")
    args = p.parse_args()
    args.log = args.log or args.out.with_suffix(".log")
    args.log.write_text("")
    if args.steps < 2:
        sys.exit("time_model_check: --steps must be at least 2 (the first step is not measured)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="lms-time-model-") as tmp:
        work = pathlib.Path(tmp)
        for case in args.case or DEFAULT_CASES:
            name, model, batch = parse_case(case)
            plain = measure_plan(args, work, name, model, batch, "plain", 0)
            rows.append(plain)
            if "arena_device_bytes" not in plain:
                continue
            budget = int(plain["arena_device_bytes"] * args.fraction)
            for strategy in args.strategies.split(","):
                if strategy != "plain":
                    rows.append(measure_plan(args, work, name, model, batch, strategy, budget))
            print(table(rows, args), flush=True)
    args.out.write_text(table(rows, args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
