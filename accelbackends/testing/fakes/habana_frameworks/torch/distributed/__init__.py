"""Fake ``habana_frameworks.torch.distributed``. Test code only."""
