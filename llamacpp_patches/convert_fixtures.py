"""Convert the fixture checkpoints (build/fixtures/<target>/<role>/, Hugging Face format) to GGUF
with the patched tree's converter, into build/fixtures/gguf/<target>-<role>.gguf.

    .venvs/core/bin/python llamacpp_patches/convert_fixtures.py [--fixtures DIR] [--out DIR]
        [--targets qwen3,lfm2,lfm2_vl]

Targets are written as f32; drafters with --target-model-dir (they take the target's vocabulary
and, where they have none, its embeddings); a vision-language target also gets its projector,
<target>-mmproj.gguf. Each output is rebuilt only when its inputs change: the checkpoint's files,
the converter tree's commit (pin + series) and this script.

The fixtures' tokenizer is a byte-level BPE whose pre-tokenizer is exactly Qwen2's. The converter
identifies pre-tokenizers by hashing the token ids of a probe string, which depend on the
vocabulary, so it cannot know ours. Rather than adding a hash for a throwaway vocabulary to the
converter, the lookup is wrapped here: a tokenizer.json whose pre-tokenizer is Qwen2's, verbatim,
is reported as "qwen2" (llama.cpp then splits with the same regex); anything else goes through
the converter's own lookup.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import runpy
import subprocess
import sys
from pathlib import Path

from blockdraft.fixtures.tokenizer import QWEN2_PRETOKENIZER_REGEX

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "llama.cpp"
TARGET_ROLE = "target"
# the families llama.cpp serves: in tests/llamacpp, and the benchmark family (ci/bench.py). All
# stay f32: on this 2-core CPU a verify window of 8 tokens costs 3.5 one-token steps of the
# benchmark target in F32, 4.1 in BF16, 4.9 in F16, 5.9 in Q8_0 (docs/benchmark.md).
TARGETS = "qwen3,lfm2,lfm2_vl,qwen3_bench"


def has_qwen2_pretokenizer(model_dir: Path) -> bool:
    """True when tokenizer.json splits with Qwen2's regex and then maps bytes, as Qwen2 does."""
    tokenizer_json = model_dir / "tokenizer.json"
    if not tokenizer_json.is_file():
        return False
    pre = json.loads(tokenizer_json.read_text()).get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    return (len(steps) == 2
            and steps[0].get("type") == "Split"
            and steps[0].get("pattern") == {"Regex": QWEN2_PRETOKENIZER_REGEX}
            and steps[0].get("behavior") == "Isolated" and not steps[0].get("invert")
            and steps[1].get("type") == "ByteLevel" and not steps[1].get("add_prefix_space")
            and not steps[1].get("use_regex"))


def run_converter(args: list[str]) -> None:
    """Run the tree's convert_hf_to_gguf.py in this process with the pre-tokenizer lookup wrapped."""
    sys.path[0] = str(TREE)  # as when the script runs itself: conversion/ and models/ resolve there
    from conversion.base import TextModel

    lookup = TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer) -> str:
        if has_qwen2_pretokenizer(Path(self.dir_model)):
            return "qwen2"
        return lookup(self, tokenizer)

    TextModel.get_vocab_base_pre = get_vocab_base_pre
    sys.argv = [str(TREE / "convert_hf_to_gguf.py"), *args]
    runpy.run_path(sys.argv[0], run_name="__main__")


def digest(paths: list[Path], *extra: str) -> str:
    h = hashlib.sha256()
    for path in paths:
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(file.relative_to(path)).encode())
            h.update(file.read_bytes())
    for item in extra:
        h.update(item.encode())
    return h.hexdigest()


def conversions(fixtures: Path, out: Path, targets: list[str]) -> list[tuple[Path, list[str], list[Path]]]:
    """(output file, converter arguments, input folders) for every checkpoint of the targets."""
    jobs = []
    configs = [c for t in targets for c in fixtures.glob(f"{t}/*/config.json")]
    for config in sorted(configs, key=lambda c: (c.parent.name != TARGET_ROLE, c)):
        model_dir = config.parent
        target_name, role = model_dir.parent.name, model_dir.name
        target_dir = model_dir.parent / TARGET_ROLE
        gguf = out / f"{target_name}-{role}.gguf"
        if role == TARGET_ROLE:
            jobs.append((gguf, [str(model_dir), "--outtype", "f32", "--outfile", str(gguf)], [model_dir]))
            if "vision_config" in json.loads(config.read_text()):
                mmproj = out / f"{target_name}-mmproj.gguf"
                jobs.append((mmproj, [str(model_dir), "--mmproj", "--outtype", "f32",
                                      "--outfile", str(mmproj)], [model_dir]))
        else:
            jobs.append((gguf, [str(model_dir), "--target-model-dir", str(target_dir),
                                "--outtype", "f32", "--outfile", str(gguf)], [model_dir, target_dir]))
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=ROOT / "build" / "fixtures")
    parser.add_argument("--out", type=Path, help="default: FIXTURES/gguf")
    parser.add_argument("--targets", default=TARGETS, help=f"default: {TARGETS}")
    args = parser.parse_args()
    out = args.out or args.fixtures / "gguf"
    out.mkdir(parents=True, exist_ok=True)
    if not (TREE / "convert_hf_to_gguf.py").is_file():
        sys.exit(f"{TREE} has no converter; run ci/setup/llamacpp.sh first")
    tree_commit = subprocess.run(["git", "-C", str(TREE), "rev-parse", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout.strip()
    jobs = conversions(args.fixtures, out, args.targets.split(","))
    if not jobs:
        sys.exit(f"no checkpoints under {args.fixtures}/{{{args.targets}}}/<role>/")
    script = Path(__file__).read_bytes().decode()
    failed = []
    for gguf, converter_args, inputs in jobs:
        stamp = gguf.with_suffix(".gguf.digest")
        want = digest(inputs, tree_commit, script)
        if gguf.is_file() and stamp.is_file() and stamp.read_text() == want:
            print(f"{gguf.name}: up to date")
            continue
        print(f"{gguf.name}: converting {converter_args[0]}", flush=True)
        run = subprocess.run([sys.executable, __file__, "--run-converter", *converter_args],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{gguf.name}: the converter failed:\n{run.stderr[-3000:]}", file=sys.stderr)
            failed.append(gguf.name)
            continue
        stamp.write_text(want)
    if failed:
        sys.exit(f"not converted: {', '.join(failed)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run-converter"]:
        run_converter(sys.argv[2:])
    else:
        main()
