"""The plants of the checkers' self-tests (tests/docscheck.py,
tests/promcheck.py): a drift written into a scratch copy of the tree,
which the checker must then report."""

import os


def edit(tool, rel, old, new):
    """A plant: replaces the first OLD in REL by NEW.  OLD must be there:
    a plant that no longer applies stops TOOL's self-test, so that it never
    passes for want of a drift."""
    def plant(scratch):
        path = os.path.join(scratch, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if old not in text:
            raise SystemExit("%s --self-test: %r is not in %s"
                             % (tool, old, rel))
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
    return plant
