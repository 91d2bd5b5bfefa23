from __future__ import annotations

import warnings

# bpe-openai reads its vocabularies with a deprecated importlib.resources call at import time;
# import it once here with that one warning silenced (warnings are errors in this suite).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="open_binary is deprecated", category=DeprecationWarning)
    import shared.tokens  # noqa: F401
