"""Largest batch and training speed under a device-memory cap: lms versus PyTorch.

Trains ResNet-50 (fixtures/data/onnx/light/light_resnet50.onnx; torchvision's resnet50 on
the PyTorch side) and a GPT-2-small-shaped decoder (make_gpt2.py; the same structure in
plain PyTorch) at increasing batch sizes under one cap of device memory (16 GiB by
default), with

  lms            `lms compile --batch B` then `lms run --device cuda --device-memory CAP`
  lms+tflms      `lms compile --batch B --strategy tflms --budget CAP-RESERVE`, then the same run
  lms+auto       the same with `--strategy auto` (swap, recompute and batch split by cost)
  torch          eager PyTorch, torch.cuda.set_per_process_memory_fraction(CAP / total)
  torch+ckpt     the same with torch.utils.checkpoint around every block
  torch+cpu      the same with torch.autograd.graph.save_on_cpu(pin_memory=True)

All in f32 with TF32 off on both sides, SGD (lr 0.01), softmax cross-entropy, synthetic
data. For each system the batches run in increasing order until the first failure (out
of memory, or a plan that does not fit); samples/s = batch / mean step time after the
warm-up steps. Prints one table (largest batch and samples/s per system and model) and
writes it, with the GPU's name and the date, to runtime/bench/results/.

  python3 runtime/bench/gpu_benchmark.py                      # everything (about 30 min)
  python3 runtime/bench/gpu_benchmark.py --models resnet50 --systems lms,lms+tflms
  python3 runtime/bench/gpu_benchmark.py --dry-run            # no GPU: made-up timings

Needs: the `lms` binary (cargo build --release), PyTorch with CUDA, torchvision, onnx and
numpy; lms finds cuDNN, cuBLAS and NVRTC itself (the loader's path, the CUDA toolkit,
PyTorch's nvidia packages) and runs with the environment unchanged: a library folder put
first on LD_LIBRARY_PATH can hold the toolkit's stub libcuda, which no GPU answers.
"""

import argparse
import dataclasses
import datetime
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RESNET50 = ROOT / "fixtures" / "data" / "onnx" / "light" / "light_resnet50.onnx"
SYSTEMS = ["lms", "lms+tflms", "lms+auto", "torch", "torch+ckpt", "torch+cpu"]
MODELS = ["resnet50", "gpt2"]
DEFAULT_BATCHES = {
    "resnet50": [32, 64, 96, 128, 160, 192, 256, 320, 384, 512],
    "gpt2": [2, 4, 8, 12, 16, 24, 32, 48, 64],
}
GIB = 1 << 30


@dataclasses.dataclass
class Measurement:
    """One (model, system, batch) run: samples/s, or why it failed."""

    model: str
    system: str
    batch: int
    samples_per_s: float | None = None
    peak_bytes: int | None = None
    error: str | None = None

    @property
    def ok(self):
        return self.error is None


def parse_bytes(text):
    """'16GiB', '512MiB', '1.5G' or a plain number of bytes -> bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a byte count: {text!r}")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def samples_per_second(batch, step_seconds, warmup):
    """batch / mean step time, leaving out the first `warmup` steps."""
    timed = step_seconds[warmup:]
    if not timed:
        raise ValueError(f"{len(step_seconds)} steps, none after {warmup} warm-up steps")
    return batch / (sum(timed) / len(timed))


def summarize(measurements):
    """Per (model, system): the largest batch that ran, its samples/s, the best samples/s
    at any batch, and the first failure."""
    rows = {}
    for m in measurements:
        row = rows.setdefault((m.model, m.system), {"max_batch": None, "at_max": None, "best": None,
                                                    "failure": None})
        if m.ok:
            if row["max_batch"] is None or m.batch > row["max_batch"]:
                row["max_batch"], row["at_max"] = m.batch, m.samples_per_s
            if row["best"] is None or m.samples_per_s > row["best"]:
                row["best"] = m.samples_per_s
        elif row["failure"] is None or m.batch < row["failure"][0]:
            row["failure"] = (m.batch, m.error)
    return rows


def format_table(measurements, models, systems):
    """The results as a Markdown table, one row per model and system."""
    rows = summarize(measurements)
    batches = sorted({m.batch for m in measurements})
    head = ["model", "system", "max batch", "samples/s at max", "best samples/s", "first failure"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in models:
        for system in systems:
            row = rows.get((model, system))
            if row is None:
                continue
            fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
            failure = "-" if row["failure"] is None else f"{row['failure'][0]}: {row['failure'][1]}"
            cells = [model, system, "-" if row["max_batch"] is None else str(row["max_batch"]),
                     fmt(row["at_max"]), fmt(row["best"]), failure]
            lines.append("| " + " | ".join(cells) + " |")
    per_batch = ["", "samples/s per batch:", ""]
    per_batch.append("| model | system | " + " | ".join(str(b) for b in batches) + " |")
    per_batch.append("|" + "---|" * (len(batches) + 2))
    by_key = {(m.model, m.system, m.batch): m for m in measurements}
    for model in models:
        for system in systems:
            if (model, system) not in rows:
                continue
            cells = []
            for b in batches:
                m = by_key.get((model, system, b))
                cells.append("" if m is None else (f"{m.samples_per_s:.1f}" if m.ok else "x"))
            per_batch.append(f"| {model} | {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines + per_batch)


def report(measurements, models, systems, gpu, cap, date):
    """The results file's text: header, tables, raw measurements as JSON."""
    header = [f"# lms vs PyTorch: largest batch and speed under {cap / GIB:g} GiB", "",
              f"- GPU: {gpu}", f"- date: {date}",
              "- f32, TF32 off, SGD lr 0.01, softmax cross-entropy, synthetic data", ""]
    raw = json.dumps([dataclasses.asdict(m) for m in measurements], indent=1)
    table = format_table(measurements, models, systems)
    return "\n".join(header) + "\n" + table + "\n\n```json\n" + raw + "\n```\n"


# ---- lms ----

def run_lms(lms, onnx_path, model, system, batch, cap, reserve, steps, warmup, workdir, timeout):
    """Compiles and trains one configuration with the lms binary."""
    program = workdir / f"{model}-{system.replace('+', '-')}-{batch}.lms"
    compile_cmd = [str(lms), "compile", str(onnx_path), "--batch", str(batch), "-o", str(program)]
    if system in ("lms+tflms", "lms+auto"):
        # The plan does not hold the convolutions' workspaces yet: plan under the cap by
        # `reserve` bytes, run under the cap itself.
        strategy = system.split("+")[1]
        compile_cmd += ["--strategy", strategy, "--budget", str(cap - reserve), "--host-budget", "64GiB"]
    done = subprocess.run(compile_cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        return Measurement(model, system, batch, error="compile: " + last_line(done.stderr))
    run_cmd = [str(lms), "run", str(program), "--device", "cuda", "--steps", str(steps),
               "--device-memory", str(cap), "--json"]
    try:
        done = subprocess.run(run_cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Measurement(model, system, batch, error=f"timeout after {timeout} s")
    finally:
        program.unlink(missing_ok=True)
    if done.returncode != 0:
        return Measurement(model, system, batch, error=short_error(done.stderr))
    result = json.loads(done.stdout)
    return Measurement(model, system, batch, samples_per_second(batch, result["step_seconds"], warmup),
                       result.get("peak_device_bytes"))


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else "failed"


def short_error(text):
    """'out of memory' for the kinds of running out, else the last line."""
    line = last_line(text)
    if "out of device memory" in line or "arena cannot place" in line:
        return "out of memory"
    return line[:160]


# ---- PyTorch ----

def torch_worker(args):
    """Runs in its own process: one (model, mode, batch) under the cap; prints JSON."""
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap / total))
    torch.manual_seed(0)
    if args.model == "resnet50":
        import torchvision
        net = torchvision.models.resnet50(weights=None).to(device)
        blocks = [torch.nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)]
        for layer in (net.layer1, net.layer2, net.layer3, net.layer4):
            blocks.extend(layer)
        head = torch.nn.Sequential(net.avgpool, torch.nn.Flatten(), net.fc)
        x = torch.randn(args.batch, 3, 224, 224, device=device)
        y = torch.randint(0, 1000, (args.batch,), device=device)
        params = net.parameters()
    else:
        model = Gpt2(args.layers, args.d_model, args.heads, args.seq, args.vocab).to(device)
        blocks = [model.embed] + list(model.blocks)
        head = model.head
        x = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
        y = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
        params = model.parameters()
    optimizer = torch.optim.SGD(params, lr=0.01)

    def forward():
        h = x
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False) if args.mode == "torch+ckpt" else block(h)
        logits = head(h)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    seconds = []
    try:
        for _ in range(args.steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            if args.mode == "torch+cpu":
                with torch.autograd.graph.save_on_cpu(pin_memory=True):
                    loss = forward()
            else:
                loss = forward()
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    except torch.cuda.OutOfMemoryError:
        print(json.dumps({"error": "out of memory"}))
        return
    print(json.dumps({"step_seconds": seconds, "peak_bytes": torch.cuda.max_memory_reserved()}))


def gpt2_module():
    """The GPT-2-shaped decoder of make_gpt2.py in plain PyTorch (defined lazily so that
    the rest of the script needs no torch)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d_model, heads, seq):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
            self.fc, self.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)
            self.register_buffer("mask", torch.full((seq, seq), -1e9).triu(1))

        def forward(self, h):
            b, t, d = h.shape
            q, k, v = self.qkv(self.ln1(h)).split(d, dim=-1)
            split = lambda z: z.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
            q, k, v = split(q), split(k), split(v)
            att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5 + self.mask, dim=-1)
            h = h + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return h + self.out(F.gelu(self.fc(self.ln2(h))))

    class Embed(nn.Module):
        def __init__(self, vocab, d_model, seq):
            super().__init__()
            self.wte = nn.Embedding(vocab, d_model)
            self.wpe = nn.Parameter(torch.randn(seq, d_model) * 0.02)

        def forward(self, tokens):
            return self.wte(tokens) + self.wpe

    class Model(nn.Module):
        def __init__(self, layers, d_model, heads, seq, vocab):
            super().__init__()
            self.embed = Embed(vocab, d_model, seq)
            self.blocks = nn.ModuleList(Block(d_model, heads, seq) for _ in range(layers))
            self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False))

    return Model


def Gpt2(*sizes):  # noqa: N802 (a constructor)
    return gpt2_module()(*sizes)


def run_torch(model, system, batch, args, timeout):
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--torch-worker", "--model", model,
           "--mode", system, "--batch", str(batch), "--cap-bytes", str(args.cap), "--steps", str(args.steps)]
    cmd += gpt2_flags(args)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Measurement(model, system, batch, error=f"timeout after {timeout} s")
    if done.returncode != 0:
        return Measurement(model, system, batch, error=short_error(done.stderr))
    result = json.loads(last_line(done.stdout))
    if "error" in result:
        return Measurement(model, system, batch, error=result["error"])
    return Measurement(model, system, batch, samples_per_second(batch, result["step_seconds"], args.warmup),
                       result["peak_bytes"])


def gpt2_flags(args):
    return ["--layers", str(args.layers), "--d-model", str(args.d_model), "--heads", str(args.heads),
            "--seq", str(args.seq), "--vocab", str(args.vocab)]


# ---- driving ----

def sweep(models, systems, batches, measure):
    """Runs `measure(model, system, batch)` over increasing batches per (model, system),
    stopping at the first failure."""
    results = []
    for model in models:
        for system in systems:
            for batch in sorted(batches[model]):
                m = measure(model, system, batch)
                results.append(m)
                status = f"{m.samples_per_s:.1f} samples/s" if m.ok else m.error
                print(f"{model:9} {system:11} batch {batch:5}: {status}", flush=True)
                if not m.ok:
                    break
    return results


def fake_measure(model, system, batch):
    """Made-up timings for --dry-run: a saturating speed, and a memory wall per system."""
    wall = {"lms": 128, "lms+tflms": 384, "lms+auto": 512, "torch": 128, "torch+ckpt": 320, "torch+cpu": 256}[system]
    if model == "gpt2":
        wall //= 16
    if batch > wall:
        return Measurement(model, system, batch, error="out of memory")
    speed = (1200.0 if model == "resnet50" else 90.0) * batch / (batch + 16)
    return Measurement(model, system, batch, speed, batch << 26)


def self_check():
    """The arithmetic the tables rest on."""
    assert parse_bytes("16GiB") == 16 * GIB and parse_bytes("512M") == 512 << 20 and parse_bytes("100") == 100
    assert abs(samples_per_second(64, [9.0, 0.5, 0.5], 1) - 128.0) < 1e-9
    ms = [Measurement("m", "s", 8, 10.0), Measurement("m", "s", 16, 30.0), Measurement("m", "s", 32, 20.0),
          Measurement("m", "s", 64, error="out of memory")]
    row = summarize(ms)[("m", "s")]
    assert (row["max_batch"], row["at_max"], row["best"], row["failure"]) == (32, 20.0, 30.0, (64, "out of memory"))
    table = format_table(ms, ["m"], ["s"])
    assert "| m | s | 32 | 20.0 | 30.0 | 64: out of memory |" in table, table
    assert "| m | s | 10.0 | 30.0 | 20.0 | x |" in table, table


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown GPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: " + ", ".join(SYSTEMS))
    parser.add_argument("--batches", action="append", default=[],
                        help="MODEL=B1,B2,... (repeatable); defaults per model")
    parser.add_argument("--cap", default="16GiB", help="device memory cap (default 16GiB)")
    parser.add_argument("--reserve", default="1GiB",
                        help="device memory left out of lms+tflms/lms+auto plans for kernel workspaces (default 1GiB)")
    parser.add_argument("--steps", type=int, default=5, help="steps per run (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the timing (default 2)")
    parser.add_argument("--lms", default=str(ROOT / "target" / "release" / "lms"), help="the lms binary")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per compile or run")
    parser.add_argument("--onnx", action="append", default=[], metavar="MODEL=PATH",
                        help="the ONNX file of a model (default: resnet50 from fixtures/data, gpt2 made by make_gpt2.py)")
    parser.add_argument("--out", help="results file (default runtime/bench/results/<date>-<gpu>.md)")
    parser.add_argument("--dry-run", action="store_true", help="made-up timings, no GPU: checks the tables")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cap-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        args.cap = args.cap_bytes
        return torch_worker(args)

    args.cap = parse_bytes(args.cap)
    args.reserve = parse_bytes(args.reserve)
    models = [m for m in args.models.split(",") if m]
    systems = [s for s in args.systems.split(",") if s]
    unknown = [m for m in models if m not in MODELS] + [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown model or system: {', '.join(unknown)}")
    batches = dict(DEFAULT_BATCHES)
    for spec in args.batches:
        model, _, values = spec.partition("=")
        batches[model] = [int(v) for v in values.split(",") if v]
    date = datetime.date.today().isoformat()

    if args.dry_run:
        self_check()
        gpu = "dry run (made-up timings)"
        results = sweep(models, systems, batches, fake_measure)
        out = pathlib.Path(args.out) if args.out else pathlib.Path(tempfile.gettempdir()) / "lms-gpu-benchmark-dry-run.md"
    else:
        gpu = gpu_name()
        work = pathlib.Path(tempfile.mkdtemp(prefix="lms-bench-"))
        onnx_paths = {"resnet50": RESNET50}
        for spec in args.onnx:
            model, _, path = spec.partition("=")
            if model not in MODELS or not path:
                parser.error(f"--onnx {spec!r}: expected MODEL=PATH with MODEL one of {', '.join(MODELS)}")
            onnx_paths[model] = pathlib.Path(path)
        if "gpt2" in models and "gpt2" not in onnx_paths:
            onnx_paths["gpt2"] = work / "gpt2.onnx"
            subprocess.run([sys.executable, str(HERE / "make_gpt2.py"), "-o", str(onnx_paths["gpt2"])]
                           + gpt2_flags(args), check=True)

        def measure(model, system, batch):
            if system.startswith("lms"):
                return run_lms(args.lms, onnx_paths[model], model, system, batch, args.cap, args.reserve, args.steps,
                               args.warmup, work, args.timeout)
            return run_torch(model, system, batch, args, args.timeout)

        results = sweep(models, systems, batches, measure)
        slug = re.sub(r"[^A-Za-z0-9]+", "-", gpu).strip("-").lower()
        out = pathlib.Path(args.out) if args.out else HERE / "results" / f"{date}-{slug}.md"
    text = report(results, models, systems, gpu, args.cap, date)
    print()
    print(format_table(results, models, systems))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
