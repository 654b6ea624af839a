"""Channel-spatial attention blocks (Liu & Jiang, "Revisiting the Ordering of Channel and Spatial Attention",
arXiv 2601.07310), by name in a registry of their own: shape- and dtype-preserving modules on (B, C, H, W).

    block = poolkit.get_block("cbam", channels=64)
    same = poolkit.get_block(**block.get_config())
"""

from . import primitives, sequential, parallel, residual, multiscale  # noqa: F401,I001  (registers, in this order)
from .registry import FAMILIES, Block, block_class, block_options, get_block, list_blocks, register_block

__all__ = ["FAMILIES", "Block", "block_class", "block_options", "get_block", "list_blocks", "register_block"]
