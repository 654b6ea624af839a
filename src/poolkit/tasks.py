"""The tasks poolkit learns, one list for the data, the models and training: a head predicts the targets of the
``HEAD_TASKS``; for the ``EMBEDDING_TASKS`` the pooled vector itself is the output (compared by cosine)."""

HEAD_TASKS = ("regression", "classification", "multilabel")
EMBEDDING_TASKS = ("retrieval", "similarity")
