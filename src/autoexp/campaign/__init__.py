"""The campaign layer: Megatron run folders and checkpoints, planned (``planning``), then built as DAGs
(``dags``)."""
