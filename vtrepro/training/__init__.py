"""SPLADE training (distillation, FLOPS), MLM adaptation, their recipes and data."""
