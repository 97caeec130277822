"""Data prep CLI: (demo corpus or local text) -> byte-level BPE tokenizer -> Megatron ``.bin/.idx``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from autoexp_cluster.corpus import documents

log = logging.getLogger("autoexp_cluster.prepare_data")

EOD = "<|endoftext|>"
PAD = "<|pad|>"


def train_tokenizer(lines: Iterable[str], vocab_size: int, out_dir: Path) -> None:
    """Train a byte-level BPE on local text and save it as a HF tokenizer directory (offline)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        # A pad distinct from EOD: GPTDataset masks the loss wherever the label equals pad.
        special_tokens=[EOD, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, bos_token=EOD, eos_token=EOD, unk_token=EOD, pad_token=PAD
    )
    fast.save_pretrained(str(out_dir))


def build_indexed_dataset(texts: Iterable[str], tokenizer_dir: Path, prefix: Path) -> int:
    """Tokenize documents (EOD appended, like Megatron-LM's ``--append-eod``) into ``prefix.bin/.idx``."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    eod = tok.convert_tokens_to_ids(EOD)
    dtype = np.uint16 if len(tok) < 65500 else np.int32
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    n = 0
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"] + [eod]
        builder.add_document(torch.tensor(ids, dtype=torch.int64), [len(ids)])
        n += 1
    builder.finalize(f"{prefix}.idx")
    return n


def read_text_files(paths: Sequence[Path]) -> list[str]:
    """One document per non-empty line (``.txt``) or per ``{"text": ...}`` row (``.jsonl``)."""
    docs: list[str] = []
    for path in paths:
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            if path.suffix == ".jsonl":
                try:
                    docs.append(str(json.loads(line)["text"]))
                except (ValueError, KeyError) as exc:
                    msg = f"{path}:{lineno}: expected a JSON object with a 'text' key ({exc})"
                    raise ValueError(msg) from exc
            else:
                docs.append(line)
    return docs


def prepare(output: Path, docs: list[str], vocab_size: int, name: str = "demo_text_document") -> Path:
    """Tokenizer in ``output/tokenizer``, dataset at ``output/<name>.bin/.idx``; returns the prefix."""
    output.mkdir(parents=True, exist_ok=True)
    tok_dir = output / "tokenizer"
    train_tokenizer(docs, vocab_size, tok_dir)
    prefix = output / name
    n = build_indexed_dataset(docs, tok_dir, prefix)
    log.info("wrote %d documents to %s.bin/.idx, tokenizer %s", n, prefix, tok_dir)
    return prefix


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="python -m autoexp_cluster.prepare_data", description=__doc__)
    p.add_argument("--output", type=Path, required=True, help="folder for tokenizer/ and the .bin/.idx")
    p.add_argument(
        "--input",
        type=Path,
        nargs="*",
        default=[],
        help=".txt (one doc per line) or .jsonl files; default: the deterministic demo corpus",
    )
    p.add_argument("--docs", type=int, default=4000, help="demo corpus size (documents)")
    p.add_argument("--seed", type=int, default=0, help="demo corpus seed")
    p.add_argument("--vocab-size", type=int, default=384)
    p.add_argument("--name", default="demo_text_document", help="dataset file prefix inside --output")
    args = p.parse_args(argv)
    try:
        docs = read_text_files(args.input) if args.input else list(documents(args.docs, args.seed))
    except (OSError, ValueError) as exc:
        print(f"prepare_data: error: {exc}", file=sys.stderr)
        return 2
    if not docs:
        print("prepare_data: error: no documents", file=sys.stderr)
        return 2
    prefix = prepare(args.output, docs, args.vocab_size, args.name)
    print(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
