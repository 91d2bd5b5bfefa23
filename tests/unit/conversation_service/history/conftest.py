import warnings

# bpe-openai 0.1.4 reads its vocabulary through a deprecated importlib API when first imported, and
# the suite turns warnings into errors: import it once here, with only that warning silenced,
# before any test module pulls in shared.tokens.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="open_binary is deprecated", category=DeprecationWarning)
    import bpe_openai  # noqa: F401
