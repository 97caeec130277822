"""The campaign layer: Megatron's run folders and checkpoints, planned (``planning``), then built as DAGs (``dags``)."""
