"""Fake ``habana_frameworks`` (Intel Gaudi software). Test code only."""
