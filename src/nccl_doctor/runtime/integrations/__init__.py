"""Framework integrations, each importable only when its framework is installed:
lightning (a Callback), hf (a TrainerCallback), ray (`check` across actors or placement-group bundles)."""
