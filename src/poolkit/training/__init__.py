"""Training: metrics, cached-feature probing (encode once, train many poolers) and fine-tuning."""

from ..extras import require

require("hf")
require("cli")
