"""Cluster-side tools run inside sbatch jobs: trainer, converter, evaluator, data preparation."""

import os

# megatron-core wraps its fused functions in torch.compile when it is imported, which loads
# TorchDynamo and Inductor. The models here are built with every fusion off (model.UNFUSED), so no
# compiled function ever runs: without Dynamo the import costs each training and each conversion
# about 0.9 CPU-s less. A job's own TORCHDYNAMO_DISABLE (e.g. 0, in the YAML's JOB_ENV) wins.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
