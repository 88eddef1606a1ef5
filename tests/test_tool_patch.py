"""`apply_patch`: the Codex format, applied all or nothing inside the sandbox."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from tools_support import Recorder, ws

from subsessions.config import Invocation
from subsessions.errors import InvalidArguments
from subsessions.tools import (
    NO_APPROVAL,
    ApprovalDenied,
    FileToolError,
    PatchConflict,
    PatchSyntaxError,
    ToolContext,
    WriteNotAllowed,
    builtin_tools,
)
from subsessions.tools import apply_patch as apply_patch_module
from subsessions.tools.patch import AddFile, DeleteFile, UpdateFile, parse_patch

__all__ = ["ws"]  # the fixture, imported so that pytest finds it here

CALL = Invocation(session_id="s", tool_call_id="call_7", tool_name="apply_patch")


def context(ws: Path, **kwargs: Any) -> ToolContext:
    return ToolContext(cwd=str(ws), exclude_slash_tmp=True, exclude_tmpdir_env_var=True,
                       **kwargs)


async def apply(ctx: ToolContext, patch: str) -> str:
    (tool,) = builtin_tools(ctx, ["apply_patch"])
    assert tool.handler is not None
    result: str = await tool.handler({"patch": patch}, CALL)
    return result


def snapshot_names(directory: Path) -> set[str]:
    return set(os.listdir(directory))


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
    }


# -- the four operations ------------------------------------------------------------------


async def test_add_file(ws: Path) -> None:
    out = await apply(context(ws), """*** Begin Patch
*** Add File: pkg/new.py
+def f():
+    return 1
*** End Patch""")
    assert out == "Success. Updated the following files:\nA pkg/new.py\n"
    assert (ws / "pkg" / "new.py").read_text() == "def f():\n    return 1\n"


async def test_update_file(ws: Path) -> None:
    (ws / "m.py").write_text("import os\nimport sys\n\ndef f():\n    return 1\n\n\ndef g():\n"
                             "    return 2\n")
    out = await apply(context(ws), """*** Begin Patch
*** Update File: m.py
@@
-import os
 import sys
@@ def g():
-    return 2
+    return 3
*** End Patch""")
    assert out == "Success. Updated the following files:\nM m.py\n"
    assert (ws / "m.py").read_text() == "import sys\n\ndef f():\n    return 1\n\n\ndef g():\n" \
        "    return 3\n"


async def test_context_header_picks_the_right_occurrence(ws: Path) -> None:
    (ws / "m.py").write_text("def a():\n    return 0\n\ndef b():\n    return 0\n")
    await apply(context(ws), """*** Begin Patch
*** Update File: m.py
@@ def b():
-    return 0
+    return 1
*** End Patch""")
    assert (ws / "m.py").read_text() == "def a():\n    return 0\n\ndef b():\n    return 1\n"


async def test_delete_file(ws: Path) -> None:
    (ws / "old.txt").write_text("bye\n")
    out = await apply(context(ws), "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch\n")
    assert out == "Success. Updated the following files:\nD old.txt\n"
    assert not (ws / "old.txt").exists()


async def test_move_file_with_changes(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    (ws / "a.py").chmod(0o755)
    out = await apply(context(ws), """*** Begin Patch
*** Update File: a.py
*** Move to: lib/b.py
@@
 x = 1
-y = 2
+y = 3
*** End Patch""")
    assert out == "Success. Updated the following files:\nM lib/b.py\n"
    assert not (ws / "a.py").exists()
    assert (ws / "lib" / "b.py").read_text() == "x = 1\ny = 3\n"
    assert (ws / "lib" / "b.py").stat().st_mode & 0o777 == 0o755  # the mode moves along


async def test_several_files_in_one_patch(ws: Path) -> None:
    (ws / "a.txt").write_text("one\n")
    (ws / "b.txt").write_text("two\n")
    out = await apply(context(ws), """*** Begin Patch
*** Add File: c.txt
+three
*** Update File: a.txt
@@
-one
+ONE
*** Delete File: b.txt
*** End Patch""")
    assert out.splitlines()[1:] == ["A c.txt", "M a.txt", "D b.txt"]
    assert snapshot(ws) == {"a.txt": b"ONE\n", "c.txt": b"three\n"}


async def test_a_file_touched_twice_sees_the_first_change(ws: Path) -> None:
    (ws / "a.txt").write_text("1\n2\n3\n")
    await apply(context(ws), """*** Begin Patch
*** Update File: a.txt
@@
-1
+one
*** Update File: a.txt
@@
 one
-2
+two
*** End Patch""")
    assert (ws / "a.txt").read_text() == "one\ntwo\n3\n"


async def test_mode_and_crlf_are_kept(ws: Path) -> None:
    (ws / "run.sh").write_bytes(b"#!/bin/sh\r\necho a\r\n")
    (ws / "run.sh").chmod(0o750)
    await apply(context(ws), """*** Begin Patch
*** Update File: run.sh
@@
 #!/bin/sh
-echo a
+echo b
*** End Patch""")
    assert (ws / "run.sh").read_bytes() == b"#!/bin/sh\r\necho b\r\n"
    assert (ws / "run.sh").stat().st_mode & 0o777 == 0o750


async def test_end_of_file_and_pure_insertions(ws: Path) -> None:
    (ws / "a.txt").write_text("x\nend\nx\nend\n")
    await apply(context(ws), """*** Begin Patch
*** Update File: a.txt
@@
 x
-end
+last
*** End of File
*** End Patch""")
    assert (ws / "a.txt").read_text() == "x\nend\nx\nlast\n"
    await apply(context(ws), """*** Begin Patch
*** Update File: a.txt
@@ end
+after the first end
@@
+appended
*** End Patch""")
    assert (ws / "a.txt").read_text() == "x\nend\nafter the first end\nx\nlast\nappended\n"


async def test_lenient_forms(ws: Path) -> None:
    (ws / "a.py").write_text("def f():   \n    return 1\n")
    # heredoc wrapper, first hunk without @@, trailing-whitespace difference, CRLF patch
    patch = "<<'EOF'\r\n*** Begin Patch\r\n*** Update File: a.py\r\n def f():\r\n" \
            "-    return 1\r\n+    return 2\r\n*** End Patch\r\nEOF\r\n"
    await apply(context(ws), patch)
    assert (ws / "a.py").read_text() == "def f():   \n    return 2\n"
    # a unified-diff header carries no context; typographic quotes match ASCII ones
    (ws / "b.txt").write_text("say \u201chi\u201d\n")
    await apply(context(ws), """*** Begin Patch
*** Update File: b.txt
@@ -1,1 +1,1 @@
-say "hi"
+say "bye"
*** End Patch""")
    assert (ws / "b.txt").read_text() == 'say "bye"\n'


async def test_symlink_inside_the_workspace_is_followed(ws: Path) -> None:
    (ws / "real.txt").write_text("a\n")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    await apply(context(ws), "*** Begin Patch\n*** Update File: alias.txt\n@@\n-a\n+b\n"
                "*** End Patch")
    assert (ws / "real.txt").read_text() == "b\n"
    assert (ws / "alias.txt").is_symlink()


# -- failures change nothing --------------------------------------------------------------


async def test_a_hunk_that_does_not_match_changes_nothing(ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo\n")
    (ws / "b.txt").write_text("alpha\nbeta\n")
    before = snapshot(ws)
    patch = """*** Begin Patch
*** Add File: new.txt
+new
*** Update File: a.txt
@@
-one
+ONE
*** Update File: b.txt
@@
-alpha
+ALPHA
@@
-gamma
+GAMMA
*** Delete File: a.txt
*** End Patch"""
    with pytest.raises(PatchConflict) as caught:
        await apply(context(ws), patch)
    message = str(caught.value)
    assert message.startswith("apply_patch failed, no file was changed: b.txt: hunk 2 "
                              "(patch line 12) did not match; expected these lines:\ngamma")
    assert snapshot(ws) == before


async def test_missing_context_line_is_named(ws: Path) -> None:
    (ws / "a.py").write_text("def f():\n    pass\n")
    with pytest.raises(PatchConflict, match=r"a.py: hunk 1 \(patch line 3\): context line "
                       "'def nope\\(\\):' not found"):
        await apply(context(ws), "*** Begin Patch\n*** Update File: a.py\n@@ def nope():\n"
                    "-    pass\n+    return\n*** End Patch")
    assert (ws / "a.py").read_text() == "def f():\n    pass\n"


async def test_missing_files(ws: Path) -> None:
    with pytest.raises(PatchConflict, match=r"gone\.txt: Update File: the file does not exist"):
        await apply(context(ws), "*** Begin Patch\n*** Update File: gone.txt\n@@\n-a\n+b\n"
                    "*** End Patch")
    with pytest.raises(PatchConflict, match=r"gone\.txt: Delete File: the file does not exist"):
        await apply(context(ws), "*** Begin Patch\n*** Delete File: gone.txt\n*** End Patch")
    (ws / "d").mkdir()
    with pytest.raises(FileToolError, match="d is a directory"):
        await apply(context(ws), "*** Begin Patch\n*** Add File: d\n+x\n*** End Patch")
    (ws / "bin.dat").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FileToolError, match=r"bin\.dat is not a UTF-8 text file"):
        await apply(context(ws), "*** Begin Patch\n*** Update File: bin.dat\n@@\n-a\n+b\n"
                    "*** End Patch")


async def test_a_failure_while_writing_restores_everything(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "a.txt").write_text("a\n")
    (ws / "b.txt").write_text("b\n")
    before = snapshot(ws)
    real_replace = os.replace
    calls = []

    def failing_replace(src: str, dst: str, **fds: int) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", dst)
        real_replace(src, dst, **fds)

    monkeypatch.setattr(apply_patch_module.os, "replace", failing_replace)
    with pytest.raises(FileToolError, match=r"cannot change .*b\.txt: No space left on device; "
                       "the files changed before it were restored"):
        await apply(context(ws), "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n"
                    "*** Update File: b.txt\n@@\n-b\n+B\n*** Add File: new/c.txt\n+c\n"
                    "*** End Patch")
    assert snapshot(ws) == before  # no temp files left behind either
    assert not (ws / "new").exists()


# -- the sandbox --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["../outside.txt", "sub/../../outside.txt", "link/x.txt",
                                  "/etc/subsessions-test.txt", "file-link"])
async def test_paths_outside_the_workspace_are_refused(ws: Path, path: str) -> None:
    outside_dir = ws.parent / "elsewhere"
    outside_dir.mkdir()
    (ws / "link").symlink_to(outside_dir)
    (ws / "file-link").symlink_to(outside_dir / "target.txt")
    (ws / "sub").mkdir()
    before = snapshot(ws.parent)
    patch = f"*** Begin Patch\n*** Add File: ok.txt\n+fine\n*** Add File: {path}\n+x\n" \
            "*** End Patch"
    with pytest.raises(WriteNotAllowed, match=r"apply_patch refused, no file was changed: "
                       r"writing .* is not allowed: it is outside the writable roots"):
        await apply(context(ws), patch)
    assert snapshot(ws.parent) == before
    assert "subsessions-test.txt" not in snapshot_names(Path("/etc"))


async def test_moving_or_deleting_outside_is_refused(ws: Path) -> None:
    (ws / "a.txt").write_text("a\n")
    (ws.parent / "victim.txt").write_text("v\n")
    with pytest.raises(WriteNotAllowed):
        await apply(context(ws), "*** Begin Patch\n*** Update File: a.txt\n"
                    "*** Move to: ../moved.txt\n@@\n-a\n+b\n*** End Patch")
    with pytest.raises(WriteNotAllowed):
        await apply(context(ws), "*** Begin Patch\n*** Delete File: ../victim.txt\n*** End Patch")
    assert (ws / "a.txt").read_text() == "a\n"
    assert (ws.parent / "victim.txt").exists()
    assert not (ws.parent / "moved.txt").exists()


async def test_read_only_sandbox_refuses_every_write(ws: Path) -> None:
    with pytest.raises(WriteNotAllowed, match="the sandbox is read-only"):
        await apply(context(ws, sandbox="read-only"),
                    "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch")
    assert not (ws / "a.txt").exists()


async def test_full_access_writes_anywhere(ws: Path) -> None:
    await apply(context(ws, sandbox="danger-full-access"),
                "*** Begin Patch\n*** Add File: ../free.txt\n+x\n*** End Patch")
    assert (ws.parent / "free.txt").read_text() == "x\n"


# -- approval policies --------------------------------------------------------------------


OUTSIDE_PATCH = "*** Begin Patch\n*** Add File: ../out.txt\n+x\n*** End Patch"


async def test_never_refuses_outside_writes_without_asking(ws: Path) -> None:
    asked = Recorder()
    with pytest.raises(WriteNotAllowed, match=r"\(approval policy never\)"):
        await apply(context(ws, approval="never", ask_permission=asked), OUTSIDE_PATCH)
    assert asked.requests == []
    with pytest.raises(WriteNotAllowed):
        await apply(context(ws, approval="on-request", ask_permission=asked).for_child(),
                    OUTSIDE_PATCH)
    assert asked.requests == []


async def test_on_request_asks_for_outside_writes(ws: Path) -> None:
    asked = Recorder("approved")
    ctx = context(ws, approval="on-request", ask_permission=asked)
    await apply(ctx, "*** Begin Patch\n*** Add File: in.txt\n+x\n*** End Patch")
    assert asked.requests == []  # inside the workspace: no question
    await apply(ctx, OUTSIDE_PATCH)
    assert (ws.parent / "out.txt").read_text() == "x\n"
    (request,) = asked.requests
    assert request["kind"] == "write"
    assert request["paths"] == ["../out.txt"]
    assert request["patch"] == OUTSIDE_PATCH
    assert request["reason"] == "outside-sandbox"
    assert request["tool_call_id"] == "call_7"
    assert "outside the writable roots" in request["sandbox_problems"][0]


async def test_an_approved_write_outside_makes_its_directories(ws: Path) -> None:
    asked = Recorder("approved")
    await apply(context(ws, approval="on-request", ask_permission=asked),
                "*** Begin Patch\n*** Add File: ../new/dir/out.txt\n+x\n*** End Patch")
    assert (ws.parent / "new" / "dir" / "out.txt").read_text() == "x\n"
    assert len(asked.requests) == 1


async def test_on_request_denied_changes_nothing(ws: Path) -> None:
    asked = Recorder("denied-interactively-by-user")
    with pytest.raises(ApprovalDenied, match=r"applying the patch to \.\./out\.txt was not "
                       r"approved \(denied-interactively-by-user\)"):
        await apply(context(ws, approval="on-request", ask_permission=asked), OUTSIDE_PATCH)
    assert not (ws.parent / "out.txt").exists()
    with pytest.raises(ApprovalDenied, match=NO_APPROVAL):
        await apply(context(ws, approval="on-request"), OUTSIDE_PATCH)


async def test_untrusted_asks_for_every_patch(ws: Path) -> None:
    asked = Recorder("approved")
    await apply(context(ws, approval="untrusted", ask_permission=asked),
                "*** Begin Patch\n*** Add File: in.txt\n+x\n*** End Patch")
    assert [r["reason"] for r in asked.requests] == ["untrusted"]
    assert (ws / "in.txt").exists()
    asked.answer = "denied-by-rules"
    with pytest.raises(ApprovalDenied, match="denied-by-rules"):
        await apply(context(ws, approval="untrusted", ask_permission=asked),
                    "*** Begin Patch\n*** Delete File: in.txt\n*** End Patch")
    assert (ws / "in.txt").exists()


async def test_a_patch_that_cannot_apply_asks_nobody(ws: Path) -> None:
    asked = Recorder()
    with pytest.raises(PatchConflict):
        await apply(context(ws, approval="untrusted", ask_permission=asked),
                    "*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch")
    assert asked.requests == []


# -- malformed patches --------------------------------------------------------------------


@pytest.mark.parametrize(("patch", "message"), [
    ("", "line 1: the first line must be '*** Begin Patch'"),
    ("hello", "line 1: the first line must be '*** Begin Patch'"),
    ("*** Begin Patch\n*** Add File: a\n+x\n", "line 3: the last line must be '*** End Patch'"),
    ("*** Begin Patch\n*** End Patch", "line 1: the patch changes no file"),
    ("*** Begin Patch\n*** Create File: a\n*** End Patch",
     "line 2: expected '*** Add File:', '*** Update File:' or '*** Delete File:', got "
     "'*** Create File: a'"),
    ("*** Begin Patch\n*** Add File:   \n+x\n*** End Patch", "line 2: '*** Add File:' without a"),
    ("*** Begin Patch\n*** Update File: a\n*** End Patch", "line 2: 'Update File: a' has no hunks"),
    ("*** Begin Patch\n*** Update File: a\n@@\n*** End Patch", "line 3: a hunk with no lines"),
    ("*** Begin Patch\n*** Update File: a\n@@\nfoo\n*** End Patch",
     "line 4: unexpected line in a hunk: 'foo'"),
    ("*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\nbar\n*** End Patch",
     "line 6: expected a hunk starting with '@@', got 'bar'"),
    ("*** Begin Patch\n*** Update File: a\n-x\n+y\n*** End of File\n-z\n*** End Patch",
     "line 6: expected a hunk starting with '@@', got '-z'"),
])
async def test_malformed_patches(ws: Path, patch: str, message: str) -> None:
    (ws / "a").write_text("x\n")
    with pytest.raises(PatchSyntaxError, match="^invalid patch, " + _escape(message)):
        await apply(context(ws), patch)
    assert (ws / "a").read_text() == "x\n"


def _escape(text: str) -> str:
    import re

    return re.escape(text)


async def test_malformed_arguments(ws: Path) -> None:
    with pytest.raises(InvalidArguments, match="invalid arguments for apply_patch: missing "
                       "required field patch"):
        await apply_patch_module.run_apply_patch(context(ws), {}, CALL)
    with pytest.raises(InvalidArguments, match="patch must be a string"):
        await apply_patch_module.run_apply_patch(context(ws), {"patch": ["x"]}, CALL)


def test_parse_patch_shapes() -> None:
    ops = parse_patch("""*** Begin Patch
*** Add File: a
+1

*** Delete File: b
*** Update File: c
*** Move to: d
@@ class C:
 keep
-old
+new
*** End Patch""")
    assert ops[0] == AddFile("a", "1\n", 2)
    assert ops[1] == DeleteFile("b", 5)
    update = ops[2]
    assert isinstance(update, UpdateFile)
    assert (update.path, update.move_to, update.line) == ("c", "d", 6)
    (hunk,) = update.hunks
    assert (hunk.context, hunk.old, hunk.new, hunk.end_of_file) == (
        "class C:", ("keep", "old"), ("keep", "new"), False
    )
