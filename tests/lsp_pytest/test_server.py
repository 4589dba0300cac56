"""The Tessera language server through a third-party client (pytest-lsp / pygls).

Starts the real server (``$TESSERA_LSP``, default ``$CARGO_TARGET_DIR/debug/tessera-lsp``
with ``target`` as the target directory when none is set) and checks
diagnostics, hover, completion and formatting. pytest-lsp also checks every response
against the LSP specification and the client capabilities declared below.
"""

from __future__ import annotations

import asyncio
import os
import pathlib

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET_DIR = pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
SERVER = os.environ.get("TESSERA_LSP", str(TARGET_DIR / "debug" / "tessera-lsp"))
GEMM = (ROOT / "examples" / "gemm.tsr").read_text()
URI = "file:///tmp/tessera-pytest/gemm.tsr"
TIMEOUT = 30  # seconds to wait for a notification

if not pathlib.Path(SERVER).is_file():
    pytest.exit(f"server not found: {SERVER} (build it, or set TESSERA_LSP)", returncode=2)


def capabilities(markdown: bool) -> types.ClientCapabilities:
    formats = [types.MarkupKind.Markdown, types.MarkupKind.PlainText] if markdown else [types.MarkupKind.PlainText]
    return types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            hover=types.HoverClientCapabilities(content_format=formats),
            completion=types.CompletionClientCapabilities(
                completion_item=types.ClientCompletionItemOptions(documentation_format=formats),
            ),
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
        )
    )


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[SERVER]), params=[True, False], ids=["markdown", "plaintext"])
async def client(lsp_client: LanguageClient, request):
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities(markdown=request.param),
            initialization_options={"target": "sm_90"},
        )
    )
    lsp_client.markdown = request.param
    yield
    await lsp_client.shutdown_session()


def open_doc(client: LanguageClient, text: str, version: int = 1) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=URI, language_id="tessera", version=version, text=text)
        )
    )


# Target lints (register/shared-memory/occupancy estimates, autotune pruning) depend on
# the target analyses, which keep improving; the checks below are about the rest.
TARGET_LINTS = {"E0500", "E0501", "E0703", "W0600", "W0601", "W0602", "W0603", "W0604", "W0702"}


async def diagnostics(client: LanguageClient, version: int) -> list[types.Diagnostic]:
    """The diagnostics published for ``version`` of the document (target lints left out)."""
    while True:
        params = await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), TIMEOUT)
        if params.uri == URI and params.version == version:
            return [d for d in params.diagnostics if d.code not in TARGET_LINTS]


def position_of(text: str, needle: str, nth: int = 0) -> types.Position:
    offset = -1
    for _ in range(nth + 1):
        offset = text.index(needle, offset + 1)
    line = text.count("\n", 0, offset)
    col = offset - (text.rfind("\n", 0, offset) + 1)
    return types.Position(line=line, character=col)


async def test_diagnostics_appear_and_clear(client: LanguageClient):
    open_doc(client, GEMM)
    assert await diagnostics(client, 1) == []
    # b_s as a BN x BN buffer: the MMA's inner dims (BK vs BN) no longer agree.
    broken = GEMM.replace("b_s = tile.alloc_shared((ctx.BK, ctx.BN)", "b_s = tile.alloc_shared((ctx.BN, ctx.BN)")
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=broken)],
        )
    )
    found = await diagnostics(client, 2)
    codes = [d.code for d in found]
    assert "E0301" in codes, found
    e = next(d for d in found if d.code == "E0301")
    assert e.severity == types.DiagnosticSeverity.Error
    assert "BK" in e.message and "BN" in e.message, e.message
    assert [d for d in client.diagnostics[URI] if d.code not in TARGET_LINTS] == found
    # Fix it with an incremental edit of the one character range.
    pos = position_of(broken, "ctx.BN, ctx.BN)")
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=3),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(
                        start=types.Position(line=pos.line, character=pos.character + 4),
                        end=types.Position(line=pos.line, character=pos.character + 6),
                    ),
                    text="BK",
                )
            ],
        )
    )
    assert await diagnostics(client, 3) == []


async def test_hover_shows_shapes_and_policies(client: LanguageClient):
    src = GEMM.replace('A: Tensor["M", "K", bf16]', 'A: Tensor["M", "K", bf16 @accum(f32)]')
    open_doc(client, src)
    await diagnostics(client, 1)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=position_of(src, "acc = tile.zeros"))
    )
    assert hover is not None
    assert isinstance(hover.contents, types.MarkupContent)
    expected_kind = types.MarkupKind.Markdown if client.markdown else types.MarkupKind.PlainText
    assert hover.contents.kind == expected_kind
    assert "acc: tile<BMxBNxf32>" in hover.contents.value
    if not client.markdown:
        assert "```" not in hover.contents.value
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=URI), position=position_of(src, "A[m0"))
    )
    assert 'A: Tensor["M", "K", bf16 @accum(f32)]' in hover.contents.value
    assert "accumulated in f32" in hover.contents.value


async def test_completion_of_tile_members(client: LanguageClient):
    src = GEMM.replace("                tile.barrier()\n                acc", "                tile.\n                acc", 1)
    open_doc(client, src)
    await diagnostics(client, 1)
    pos = position_of(src, "tile.\n")
    result = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            position=types.Position(line=pos.line, character=pos.character + 5),
        )
    )
    items = result.items if isinstance(result, types.CompletionList) else result
    by_label = {i.label: i for i in items}
    for name in ["load", "store", "cp_async", "barrier", "mma", "alloc_shared"]:
        assert name in by_label, sorted(by_label)
    load = by_label["load"]
    assert load.detail.startswith("tile.load(src")
    assert "global tensor" in load.documentation.value


async def test_formatting(client: LanguageClient):
    messy = 'from tessera import *\n@jit\ndef f(x:Tensor["N",f32],y:Tensor["N",f32])->Tensor["N",f32]:\n  return x+y  # sum\n'
    open_doc(client, messy)
    await diagnostics(client, 1)
    edits = await client.text_document_formatting_async(
        types.DocumentFormattingParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            options=types.FormattingOptions(tab_size=4, insert_spaces=True),
        )
    )
    assert edits is not None and len(edits) == 1
    assert edits[0].new_text == (
        "from tessera import *\n\n\n@jit\n"
        'def f(x: Tensor["N", f32], y: Tensor["N", f32]) -> Tensor["N", f32]:\n'
        "    return x + y  # sum\n"
    )
