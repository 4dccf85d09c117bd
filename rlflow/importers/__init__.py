"""Importers: other trainers' configs turned into rlflow pipelines (``rlflow import-verl``).

One layer above the validator's inputs: they read a foreign config with that trainer's own
library (Hydra and OmegaConf for verl) and write a pipeline the schemas and checks accept.
"""
