"""Modeling files shipped next to converted checkpoints that no stock transformers class expresses."""
