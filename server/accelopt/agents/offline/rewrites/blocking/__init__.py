"""The parts of the block_accumulators rewrite (see rewrites/block_accumulators.py)."""
