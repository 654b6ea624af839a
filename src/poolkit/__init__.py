"""poolkit: pooling that is correct under padding and dtypes."""
