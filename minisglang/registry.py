"""A tiny registry of pluggable classes (as mini-sglang's `register("radix")`).

STAGES = Registry("stage", attr="tag")

@STAGES.register("s1-masked-fill")
class MaskedFillStage(Stage): ...

STAGES.get("s1-masked-fill")  # -> MaskedFillStage
"""

from __future__ import annotations


class Registry:
    def __init__(self, what: str, attr: str = "name"):
        self.what = what  # for error messages: "stage", "grammar backend"
        self.attr = attr  # the class attribute that records its registered name
        self.classes: dict[str, type] = {}

    def register(self, name: str):
        """Class decorator that files the class under `name`."""

        def wrap(cls: type) -> type:
            setattr(cls, self.attr, name)
            self.classes[name] = cls
            return cls

        return wrap

    def __contains__(self, name: str) -> bool:
        return name in self.classes

    def get(self, name: str) -> type:
        if name not in self.classes:
            raise ValueError(f"unknown {self.what} {name!r}; registered: {sorted(self.classes)}")
        return self.classes[name]
