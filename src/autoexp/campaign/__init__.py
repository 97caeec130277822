"""The campaign layer: Megatron run folders and checkpoints, planned (``planning``), built (``dags``)."""
