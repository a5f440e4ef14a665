"""Package data: the offline default corpus (``default_corpus.txt``)."""
