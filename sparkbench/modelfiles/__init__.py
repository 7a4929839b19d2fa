"""A model's facts from its own files (config.json and safetensors headers): ``sparkbench profile``."""
