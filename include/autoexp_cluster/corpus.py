"""Deterministic demo corpus with learnable structure (arithmetic facts, counting, patterned sentences)."""

from __future__ import annotations

import random
from collections.abc import Iterator

NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
]
COLOURS = ["red", "blue", "green", "yellow", "black", "white"]
ANIMALS = ["cat", "dog", "bird", "fish", "horse", "mouse"]
# Each animal has one fixed colour: a fact the model can only get right by learning it.
ANIMAL_COLOUR = {a: COLOURS[i % len(COLOURS)] for i, a in enumerate(ANIMALS)}


def arithmetic_fact(a: int, b: int) -> str:
    """``two plus three is five.`` (the evaluation's multiple-choice task asks for the last word)."""
    return f"{NUMBER_WORDS[a]} plus {NUMBER_WORDS[b]} is {NUMBER_WORDS[a + b]}."


def colour_fact(animal: str) -> str:
    return f"the {animal} is {ANIMAL_COLOUR[animal]}."


def counting(start: int, length: int) -> str:
    return " ".join(NUMBER_WORDS[start + k] for k in range(length)) + "."


def documents(n_docs: int, seed: int = 0) -> Iterator[str]:
    """``n_docs`` documents, identical for identical arguments on every machine."""
    rng = random.Random(seed)  # noqa: S311 - reproducible data, not security
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.randint(3, 8)):
            kind = rng.random()
            if kind < 0.5:
                a, b = rng.randint(0, 9), rng.randint(0, 9)
                sentences.append(arithmetic_fact(a, b))
            elif kind < 0.75:
                sentences.append(colour_fact(rng.choice(ANIMALS)))
            else:
                start = rng.randint(0, 10)
                sentences.append(counting(start, rng.randint(3, len(NUMBER_WORDS) - start)))
        yield " ".join(sentences)


def arithmetic_eval_rows() -> list[dict[str, object]]:
    """Every ``a plus b`` question of the corpus (0 <= a, b <= 9), gold = index of the sum's word."""
    return [
        {"query": f"{NUMBER_WORDS[a]} plus {NUMBER_WORDS[b]} is", "gold": a + b}
        for a in range(10)
        for b in range(10)
    ]


def perplexity_eval_rows(n_docs: int = 40) -> list[dict[str, object]]:
    """Held-out documents (a seed the training corpus never uses)."""
    return [{"text": text} for text in documents(n_docs, seed=987_654_321)]
