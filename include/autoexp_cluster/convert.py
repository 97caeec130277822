"""Megatron checkpoint (torch_dist or legacy) -> HuggingFace ``save_pretrained`` directory, exactly."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoexp_cluster.ckpt_reader import CheckpointError, read_checkpoint
from autoexp_cluster.export_check import ExportMismatchError, LogitCheck, check_export
from autoexp_cluster.hf_mapping import (
    Arch,
    UnreadableArgError,
    UnsupportedArchitectureError,
    arch_from_args,
    choose_family,
    hf_config,
    map_tensors,
)

log = logging.getLogger("autoexp_cluster.convert")

REMOTE_DIR = Path(__file__).resolve().parent / "hf_remote"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
)


class ConversionError(Exception):
    """Conversion failed; ``str()`` is one line naming the checkpoint."""


def _copy_tokenizer(source: str | None, out: Path) -> bool:
    # Megatron-LM's --tokenizer-model is a local HF tokenizer dir on the cluster: copy its files.
    if not source:
        return False
    src = Path(source)
    if src.is_dir():
        copied = [name for name in TOKENIZER_FILES if (src / name).is_file()]
        for name in copied:
            shutil.copy2(src / name, out / name)
        return bool(copied)
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(source).save_pretrained(str(out))
        return True
    except (OSError, ValueError) as exc:
        log.warning("tokenizer %s not copied: %s", source, exc)
        return False


def convert(load: Path, save: Path, tokenizer: str | None = None, check: bool = True) -> str:
    """Convert ``load`` (iter dir or checkpoints dir) into ``save``; returns the HF family used.

    The directory appears atomically: everything is written to ``save.tmp`` and renamed, so a
    killed conversion never leaves a half-written model that an evaluator could load. With ``check``
    the written model's logits are compared with megatron-core's (``export_check``) before the
    rename; the figures go to config.json's ``autoexp.logit_check`` and a mismatch writes nothing.
    """
    from safetensors.torch import save_file

    try:
        ckpt = read_checkpoint(load)
    except CheckpointError as exc:
        raise ConversionError(str(exc)) from exc
    try:
        arch = arch_from_args(ckpt.args, ckpt.tensors)
        family = choose_family(arch)
    except UnreadableArgError as exc:
        raise ConversionError(f"{ckpt.source}: {exc}") from exc
    except UnsupportedArchitectureError as exc:
        raise ConversionError(f"{load}: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise ConversionError(f"{ckpt.source}: checkpoint args lack or mistype {exc}") from exc
    try:
        tensors = map_tensors(ckpt.tensors, arch, family)
    except KeyError as exc:
        raise ConversionError(f"{load}: checkpoint has no tensor {exc} needed for {family}") from exc
    dtype = ckpt.tensors["embedding.word_embeddings.weight"].dtype
    config = hf_config(arch, family, dtype)
    config["autoexp"] = {"source": str(load), "iteration": ckpt.iteration, "format": ckpt.fmt}
    tmp = save.with_name(save.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if family == "autoexp_llama":
        for name in ("configuration_autoexp_llama.py", "modeling_autoexp_llama.py"):
            shutil.copy2(REMOTE_DIR / name, tmp / name)
    if check:
        result = _check(load, save, tmp, arch, ckpt.tensors, dtype, family)
        config["autoexp"]["logit_check"] = result.as_dict()
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        log.info(
            "logit check: max |logit diff| %.3g <= tolerance %.3g (%s, %dx%d tokens, %.2fs)",
            result.max_abs_diff, result.tolerance, result.dtype, *result.tokens, result.seconds,
        )  # fmt: skip
    else:
        log.warning("logit check skipped (--no-logit-check): %s is converted unchecked", load)
    tok_source = tokenizer or getattr(ckpt.args, "tokenizer_model", None)
    if not _copy_tokenizer(tok_source, tmp):
        log.warning("no tokenizer written to %s (source %r)", save, tok_source)
    if save.exists():
        shutil.rmtree(save)
    os.replace(tmp, save)
    log.info("converted %s (%s, iteration %d) -> %s as %s", load, ckpt.fmt, ckpt.iteration, save, family)
    return family


def _check(
    load: Path, save: Path, tmp: Path, arch: Arch, tensors: dict[str, Any], dtype: Any, family: str
) -> LogitCheck:
    # Any failure removes the unchecked model: an export is either checked or absent.
    try:
        result = check_export(tmp, arch, tensors, dtype, remote_code=family == "autoexp_llama")
    except ImportError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConversionError(
            f"{load}: the logit check needs megatron-core and transformers ({exc}); "
            "--no-logit-check converts without it"
        ) from exc
    except (KeyError, ExportMismatchError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConversionError(f"{load}: logit check impossible: {exc}; nothing written to {save}") from exc
    if not result.passed:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConversionError(
            f"{load}: exported logits differ from Megatron's: max |logit diff| {result.max_abs_diff:.3g} > "
            f"tolerance {result.tolerance:.3g} ({result.dtype}, max |logit| {result.max_abs_logit:.3g}, "
            f"{result.tokens[0]}x{result.tokens[1]} tokens); nothing written to {save}"
        )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    p = argparse.ArgumentParser(prog="python -m autoexp_cluster.convert", description=__doc__)
    p.add_argument(
        "--load", type=Path, required=True, help="iter_%%07d dir, or a checkpoints dir (its tracker)"
    )
    p.add_argument("--save", type=Path, required=True, help="output HF directory")
    p.add_argument(
        "--tokenizer", default=None, help="tokenizer dir (default: the checkpoint's --tokenizer-model)"
    )
    p.add_argument(
        "--no-logit-check",
        action="store_true",
        help="skip comparing the export's logits with megatron-core's (needs megatron-core)",
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    try:
        family = convert(args.load, args.save, args.tokenizer, check=not args.no_logit_check)
    except ConversionError as exc:
        print(f"convert: error: {exc}", file=sys.stderr)
        return 1
    print(f"converted {args.load} -> {args.save} ({family}) in {time.perf_counter() - t0:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
