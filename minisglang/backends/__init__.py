"""Grammar backends behind the s5 interface (base.py): fsm (ours), xgrammar, outlines, llguidance."""

from .base import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarError,
    InvalidGrammarObject,
    get_backend_class,
    register_backend,
)

__all__ = [
    "BaseGrammarBackend",
    "BaseGrammarObject",
    "GrammarError",
    "InvalidGrammarObject",
    "get_backend_class",
    "register_backend",
]
