"""Training: metrics, cached-feature probing (encode once, train many poolers) and fine-tuning."""
