#!/usr/bin/env python3
"""lsp.protocol: accel-lsp spoken to over stdio by a scripted client, as an editor would: initialize, didOpen,
publishDiagnostics, codeAction, codeAction/resolve, executeCommand -> workspace/applyEdit, didChange, shutdown,
exit; and the bad input the server must survive: malformed JSON and headers, unknown methods, requests before
initialize and after shutdown, a file with no compile command, a compile command naming a missing compiler, a
buffer that does not compile, a rewrite that would not compile (its error given at the buffer's line), a
file outside the workspace, a file over the size limit, the code action applied twice, a command for a version
that changed, a cancelled request, non-ASCII text before the loop (UTF-16 positions). Each applied rewrite
must equal accel-rewrite's output byte for byte.

The files include the small mirror of libtorch's API in test/passes/Inputs, so each parse takes about a second.

  protocol_test.py --server build/bin/accel-lsp --rewrite build/bin/accel-rewrite --inputs test/passes/Inputs
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lsp_client import Client, apply_text_edits, uri_of  # noqa: E402

TRAIN = """#include <torch/torch.h>

#include <iostream>

int main() {
  torch::Device device(torch::kCPU);
  auto model = torch::nn::Linear(4, 2);
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto x = torch::randn({8, 4}).to(device);
    auto loss = model->forward(x).sum();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    std::cout << "loss " << loss.item<float>() << std::endl;
  }
}
"""

# TRAIN with text that is not ASCII before the loop: two-byte, three-byte and four-byte (a surrogate pair in
# UTF-16) UTF-8 sequences, on lines the rewrite edits after them.
UNICODE = "// Données d'entraînement: π ≈ 3.14159, 😀 — a comment the rewrite keeps.\n" + (
    TRAIN.replace("  torch::Device device", '  const char* name = "modèle 😀"; torch::Device device')
    .replace("    loss.backward();", "    /* 😀😀 é */ loss.backward();")
    .replace('std::cout << "loss "', 'std::cout << name << " loss "')
)
assert UNICODE.count("😀") == 4

# Distributed by hand, with one raw backward left: the lint check accelerate-raw-backward finds it and offers
# its fix as a quick fix.
LINT = """#include <accelerate/accelerate.h>
#include <torch/torch.h>

int main() {
  accelerate::Accelerator accelerator;
  torch::nn::Linear model(4, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  for (int step = 0; step < 10; ++step) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4})).sum();
    loss.backward();
    optimizer.step();
  }
}
"""

failures = []


def check(condition, what, detail=""):
    if condition:
        print("ok   %s" % what)
    else:
        print("FAIL %s%s" % (what, (": " + detail) if detail else ""))
        failures.append(what)


def error_code(response):
    return response.get("error", {}).get("code")


def action(actions, title):
    found = [a for a in actions if a.get("title") == title]
    return found[0] if found else None


DISTRIBUTE = "Distribute this training loop with accelerate"
EXPLAIN = "Explain what the rewrite would do"


def rewritten_by_cli(rewrite, path, flags):
    """accel-rewrite's output for the file at `path` (a copy is rewritten)."""
    work = tempfile.mkdtemp(prefix="accel-lsp-cli.")
    try:
        copy = os.path.join(work, os.path.basename(path))
        shutil.copy(path, copy)
        subprocess.run([rewrite, copy, "-i", "--"] + flags, check=True, stderr=subprocess.DEVNULL)
        with open(copy, encoding="utf-8") as f:
            return f.read()
    finally:
        shutil.rmtree(work)


def edits_of(edit, uri):
    if "documentChanges" in edit:
        changes = [c for c in edit["documentChanges"] if c["textDocument"]["uri"] == uri]
        return changes[0]["edits"] if changes else []
    return edit["changes"].get(uri, [])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True)
    parser.add_argument("--rewrite", required=True)
    parser.add_argument("--inputs", required=True, help="test/passes/Inputs: the mirror of libtorch's API")
    parser.add_argument("--keep", action="store_true", help="keep the temporary workspace")
    args = parser.parse_args()
    server = os.path.abspath(args.server)
    inputs = os.path.abspath(args.inputs)
    flags = ["-std=c++17", "-I" + inputs]

    root = tempfile.mkdtemp(prefix="accel-lsp-protocol.")
    ws = os.path.join(root, "workspace")
    os.makedirs(os.path.join(ws, "build"))
    os.makedirs(os.path.join(ws, "stale"))
    files = {}
    for name, text in (("train.cpp", TRAIN), ("unicode.cpp", UNICODE), ("unlisted.cpp", TRAIN), ("lint.cpp", LINT)):
        files[name] = os.path.join(ws, name)
        with open(files[name], "w", encoding="utf-8") as f:
            f.write(text)
    # A rewrite that would not compile (the function has an accelerator under another name).
    files["unsafe"] = os.path.join(ws, "unsafe.cpp")
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tidy", "Inputs",
                             "unsafe_rewrite.cpp"), files["unsafe"])
    # A rewrite that would not compile on a line the rewrite moves down (it inserts four lines above it).
    files["moved"] = os.path.join(ws, "moved.cpp")
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tidy", "Inputs",
                             "moved_error.cpp"), files["moved"])
    files["stale"] = os.path.join(ws, "stale", "train.cpp")
    with open(files["stale"], "w") as f:
        f.write(TRAIN)
    # A second workspace folder with no compile database in it or above it.
    nodb_dir = os.path.join(root, "nodb")
    os.makedirs(nodb_dir)
    files["nodb"] = os.path.join(nodb_dir, "train.cpp")
    with open(files["nodb"], "w") as f:
        f.write(TRAIN)
    for parent in (root, os.path.dirname(root), "/"):
        for candidate in (os.path.join(parent, "compile_commands.json"), os.path.join(parent, "build", "compile_commands.json")):
            if os.path.exists(candidate):
                print("FAIL the test needs no compile database above its temporary directory, and %s is one; "
                      "remove it, or set TMPDIR to another directory" % candidate)
                return 1
    big = os.path.join(ws, "big.cpp")
    with open(big, "w") as f:
        f.write(TRAIN + "// padding\n" * 120000)  # About 1.3 MB, over the default limit of 1 MiB.
    files["big"] = big
    outside_dir = os.path.join(root, "outside")
    os.makedirs(outside_dir)
    outside = os.path.join(outside_dir, "train.cpp")
    with open(outside, "w") as f:
        f.write(TRAIN)
    entries = [
        {"directory": ws, "file": files[n], "arguments": ["clang++"] + flags + ["-c", files[n]]}
        for n in ("train.cpp", "unicode.cpp", "big", "unsafe", "moved", "lint.cpp")
    ]
    with open(os.path.join(ws, "build", "compile_commands.json"), "w") as f:
        json.dump(entries, f)
    # A database of its own whose compiler does not exist (a stale build directory).
    with open(os.path.join(ws, "stale", "compile_commands.json"), "w") as f:
        json.dump(
            [{"directory": ws, "file": files["stale"], "arguments": ["/opt/gone/bin/g++-7"] + flags + ["-c", files["stale"]]}],
            f,
        )
    with open(os.path.join(outside_dir, "compile_commands.json"), "w") as f:
        json.dump([{"directory": outside_dir, "file": outside, "arguments": ["clang++"] + flags + ["-c", outside]}], f)

    stderr_log = os.path.join(root, "server.log")
    client = Client([server], stderr_path=stderr_log)
    try:
        run(client, ws, files, outside, flags, args)
        # shutdown, then a request after it, then exit: status 0.
        response = client.request("shutdown", None, 30)
        check("result" in response and response["result"] is None, "shutdown answers null")
        late = client.request("textDocument/codeAction", {"textDocument": {"uri": uri_of(files["train.cpp"])}}, 30)
        check(error_code(late) == -32600, "a request after shutdown is refused", json.dumps(late))
        client.notify("exit", None)
        status = client.process.wait(30)
        check(status == 0, "exit after shutdown ends the server with status 0", str(status))
    finally:
        client.kill()

    # The compile check of the rewrite of train.cpp, whose runtime include the rewrite inserts among the blank
    # lines that end the preamble, ran over the preamble's PCH (the server logs how each check ran).
    with open(stderr_log, errors="replace") as f:
        log = f.read()
    check(any("workspace/train.cpp: the rewrite's compile check" in line and "(preamble reused)" in line
              for line in log.splitlines()),
          "the rewrite's compile check reuses the preamble", log[-1500:])

    # exit without shutdown: status 1, at once.
    quick = Client([server])
    try:
        quick.initialize(ws)
        quick.notify("exit", None)
        check(quick.process.wait(30) == 1, "exit without shutdown ends the server with status 1")
    finally:
        quick.kill()

    if failures:
        print("\n%d check(s) failed: %s" % (len(failures), "; ".join(failures)))
        print("server's log (%s):" % stderr_log)
        with open(stderr_log, errors="replace") as f:
            print(f.read()[-4000:])
        print("workspace kept in %s" % root)
        return 1
    if not args.keep:
        shutil.rmtree(root)
    print("\nall checks passed")
    return 0


def run(client, ws, files, outside, flags, args):
    train = files["train.cpp"]
    train_uri = uri_of(train)

    # A request before initialize.
    early = client.request("textDocument/codeAction", {"textDocument": {"uri": train_uri}}, 30)
    check(error_code(early) == -32002, "a request before initialize gets ServerNotInitialized", json.dumps(early))

    result = client.initialize(ws, folders=[ws, os.path.dirname(files["nodb"])])["result"]
    capabilities = result["capabilities"]
    check(capabilities.get("positionEncoding") == "utf-16", "the server speaks UTF-16 positions")
    check("codeActionProvider" in capabilities, "the server offers code actions")
    check(
        set(capabilities.get("executeCommandProvider", {}).get("commands", []))
        == {"accelerate.distribute", "accelerate.explain"},
        "the server lists its commands",
    )

    # ---- Malformed input: the server answers and keeps running. ----
    body = b'{"jsonrpc": "2.0", "id": 99, "method": '
    client.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    response = client.wait_response(None, 30)
    check(error_code(response) == -32700, "malformed JSON gets a ParseError with a null id", json.dumps(response))
    client.send_raw(b"Content-Type: application/vscode-jsonrpc\r\n\r\n")  # No Content-Length.
    response = client.wait_response(None, 30)
    check(error_code(response) == -32600 and "Content-Length" in response["error"]["message"],
          "a message without Content-Length gets an error naming it", json.dumps(response))
    unknown = client.request("textDocument/unknownThing", {}, 30)
    check(error_code(unknown) == -32601, "an unknown method gets MethodNotFound", json.dumps(unknown))
    client.notify("$/unknownNotification", {"x": 1})
    wrong_types = client.request("textDocument/codeAction", {"textDocument": 42}, 30)
    check(error_code(wrong_types) == -32602, "a request with wrong types gets InvalidParams", json.dumps(wrong_types))

    # ---- A plain loop: diagnostics, the code actions, the rewrite equals accel-rewrite's. ----
    started = time.monotonic()
    client.open(train, TRAIN)
    diagnostics = client.wait_diagnostics(train_uri, 1, 120)
    print("     first diagnostics in %.1f s" % (time.monotonic() - started))
    loop = [d for d in diagnostics if d.get("code") == "accelerate-distribute-loop"]
    check(
        len(loop) == 1 and loop[0]["range"]["start"] == {"line": 9, "character": 2},
        "one diagnostic at the training loop (line 10)",
        json.dumps(diagnostics),
    )
    expected = rewritten_by_cli(args.rewrite, train, flags)
    check(expected != TRAIN, "accel-rewrite rewrites the fixture")
    actions = client.code_actions(train, 9, 120)["result"]
    distribute = action(actions, DISTRIBUTE)
    check(distribute is not None and "edit" in distribute, "the code action offers the rewrite", json.dumps(actions)[:500])
    if distribute:
        check(distribute.get("kind") == "refactor.rewrite", "its kind is refactor.rewrite")
        change = distribute["edit"]["documentChanges"][0]
        check(change["textDocument"] == {"uri": train_uri, "version": 1}, "its edit names the document's version")
        applied = apply_text_edits(TRAIN, change["edits"])
        check(applied == expected, "the edit gives exactly accel-rewrite's output", diff(expected, applied))
        resolved = client.request("codeAction/resolve", distribute, 30)
        check(resolved.get("result") == distribute, "codeAction/resolve gives the action back whole")
    explain = action(actions, EXPLAIN)
    check(explain is not None and explain.get("command", {}).get("command") == "accelerate.explain",
          "an 'Explain' action carries the accelerate.explain command")
    if explain:
        response = client.request("workspace/executeCommand", explain["command"], 60)
        text = response.get("result") or ""
        check("[backward]" in text and "accelerator.backward(loss)" in text and "changes, 0 not rewritten" in text,
              "accelerate.explain gives the --explain lines", text[:400])
        shown = client.wait_message(lambda m: m.get("method") == "window/showMessage", 30)
        check("[backward]" in shown["params"]["message"], "and shows them in the editor")
    started = time.monotonic()
    again = client.code_actions(train, 9, 60)["result"]
    check(again == actions and time.monotonic() - started < 5,
          "a second request on the unchanged buffer gives the same actions at once",
          "%.2f s" % (time.monotonic() - started))

    # executeCommand accelerate.distribute: the server asks the editor to apply the edit.
    response = client.request("workspace/executeCommand",
                              {"command": "accelerate.distribute", "arguments": [{"uri": train_uri, "version": 1}]}, 60)
    check("result" in response, "accelerate.distribute is accepted", json.dumps(response))
    apply = client.wait_message(lambda m: m.get("method") == "workspace/applyEdit", 30)
    client.send({"jsonrpc": "2.0", "id": apply["id"], "result": {"applied": True}})
    applied = apply_text_edits(TRAIN, edits_of(apply["params"]["edit"], train_uri))
    check(applied == expected, "workspace/applyEdit carries accel-rewrite's edits", diff(expected, applied))

    # The editor applied it: the second time finds nothing to do, and says so.
    client.change(train, applied, 2)
    client.wait_diagnostics(train_uri, 2, 120)
    actions = client.code_actions(train, 9, 120)["result"]
    distribute = action(actions, DISTRIBUTE)
    check(distribute is not None and "nothing to do" in distribute.get("disabled", {}).get("reason", "")
          and "edit" not in distribute,
          "on the rewritten buffer the action is disabled: nothing to do", json.dumps(actions)[:400])
    response = client.request("workspace/executeCommand",
                              {"command": "accelerate.distribute", "arguments": [{"uri": train_uri, "version": 2}]}, 60)
    check(error_code(response) == -32803 and "nothing to do" in response["error"]["message"],
          "accelerate.distribute applied twice fails with 'nothing to do'", json.dumps(response))
    # A command offered for version 1, run on version 2.
    response = client.request("workspace/executeCommand",
                              {"command": "accelerate.distribute", "arguments": [{"uri": train_uri, "version": 1}]}, 60)
    check(error_code(response) == -32801, "a command for a version that changed gets ContentModified",
          json.dumps(response))

    # ---- Unsaved edits that no longer compile: no fix, the reason shown. ----
    broken = TRAIN.replace("optimizer.step();", "optimizer.step(;")
    client.change(train, broken, 3)
    diagnostics = client.wait_diagnostics(train_uri, 3, 120)
    refusal = [d for d in diagnostics if "does not compile" in d["message"]]
    check(len(refusal) == 1 and refusal[0]["range"]["start"]["line"] == 14,
          "a buffer that does not compile: one diagnostic at its first error", json.dumps(diagnostics))
    actions = client.code_actions(train, 9, 120)["result"]
    distribute = action(actions, DISTRIBUTE)
    check(distribute is not None and "edit" not in distribute
          and "does not compile" in distribute.get("disabled", {}).get("reason", ""),
          "and the action is disabled with the reason", json.dumps(actions)[:400])

    # A rewrite that would not compile: no fix, the compiler's reason shown.
    client.open(files["unsafe"])
    client.wait_diagnostics(uri_of(files["unsafe"]), 1, 120)
    actions = client.code_actions(files["unsafe"], 8, 120)["result"]
    distribute = action(actions, DISTRIBUTE)
    reason = (distribute or {}).get("disabled", {}).get("reason", "")
    check(distribute is not None and "edit" not in distribute and "would not compile" in reason
          and "error: " in reason, "a rewrite that would not compile is not offered; the first error is shown",
          json.dumps(actions)[:400])
    # Its error on a line the rewrite moved is given at the line of the buffer (15, `hook(optimizer);`), with
    # its place in the rewritten text, as the clang-tidy module gives it (test/tidy/bad-input.cpp).
    client.open(files["moved"])
    client.wait_diagnostics(uri_of(files["moved"]), 1, 120)
    actions = client.code_actions(files["moved"], 9, 120)["result"]
    distribute = action(actions, DISTRIBUTE)
    reason = (distribute or {}).get("disabled", {}).get("reason", "")
    check(distribute is not None and "edit" not in distribute
          and files["moved"] + ":15: error: no viable conversion from 'Optimizer' to 'torch::optim::SGD' "
          "(line 19, column 10 of the rewritten text)" in reason,
          "a compile error of the rewrite names the buffer's line, not the rewritten text's",
          json.dumps(actions)[:600])

    # A lint check's finding: a diagnostic with the check's name, and its fix as a quick fix on that line.
    lint = files["lint.cpp"]
    client.open(lint, LINT)
    diagnostics = client.wait_diagnostics(uri_of(lint), 1, 120)
    raw = [d for d in diagnostics if d.get("code") == "accelerate-raw-backward"]
    check(len(raw) == 1 and raw[0]["range"]["start"] == {"line": 11, "character": 4}
          and "call accelerator.backward(loss) instead" in raw[0]["message"],
          "a lint finding is a diagnostic with the check's name, at its place", json.dumps(diagnostics)[:600])
    actions = client.code_actions(lint, 11, 120)["result"]
    fixes = [a for a in actions if a.get("kind") == "quickfix"]
    check(len(fixes) == 1 and fixes[0]["diagnostics"][0].get("code") == "accelerate-raw-backward"
          and apply_text_edits(LINT, edits_of(fixes[0]["edit"], uri_of(lint)))
          == LINT.replace("loss.backward();", "accelerator.backward(loss);"),
          "its fix is a quick fix on its line", json.dumps(actions)[:600])
    check(not [a for a in client.code_actions(lint, 3, 120)["result"] if a.get("kind") == "quickfix"],
          "and only there")

    # ---- Superseded and cancelled requests. ----
    # Each change below adds an include, so the worker builds a new preamble (most of a second) while the
    # messages sent with it, in the same write, reach the server.
    def change(version, text):
        return {"jsonrpc": "2.0", "method": "textDocument/didChange",
                "params": {"textDocument": {"uri": train_uri, "version": version}, "contentChanges": [{"text": text}]}}

    def code_action(request_id):
        return {"jsonrpc": "2.0", "id": request_id, "method": "textDocument/codeAction",
                "params": {"textDocument": {"uri": train_uri},
                           "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                           "context": {"diagnostics": []}}}

    stale = client.new_id()
    client.send_together([change(4, "#include <vector>\n" + TRAIN), code_action(stale), change(5, TRAIN)])
    response = client.wait_response(stale, 120)
    check(error_code(response) == -32801, "a request the document's next change superseded gets ContentModified",
          json.dumps(response)[:300])
    cancelled = client.new_id()
    client.send_together([change(6, "#include <string>\n" + TRAIN), code_action(cancelled),
                          {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": cancelled}},
                          change(7, TRAIN)])
    response = client.wait_response(cancelled, 120)
    check(error_code(response) == -32800, "a cancelled request gets RequestCancelled", json.dumps(response)[:300])
    actions = client.code_actions(train, 9, 120)["result"]
    check(action(actions, DISTRIBUTE) is not None and "edit" in action(actions, DISTRIBUTE),
          "after them the current version is served")

    # ---- Non-ASCII text before the loop: UTF-16 positions. ----
    unicode = files["unicode.cpp"]
    client.open(unicode, UNICODE)
    client.wait_diagnostics(uri_of(unicode), 1, 120)
    actions = client.code_actions(unicode, 10, 120)["result"]
    distribute = action(actions, DISTRIBUTE)
    expected = rewritten_by_cli(args.rewrite, unicode, flags)
    if distribute and "edit" in distribute:
        edits = distribute["edit"]["documentChanges"][0]["edits"]
        applied = apply_text_edits(UNICODE, edits)
        check(applied == expected, "with non-ASCII text before the edits, UTF-16 positions give accel-rewrite's output",
              diff(expected, applied))
        backward = [e for e in edits if e["newText"] == "accelerator.backward(loss)"]
        # Line 15: 4 spaces, "/* ", two emoji (2 UTF-16 units each), " é */ " -> column 4 + 3 + 4 + 6 = 17.
        check(backward and backward[0]["range"]["start"] == {"line": 14, "character": 17},
              "the backward call's column counts UTF-16 code units", json.dumps(backward))
    else:
        check(False, "the code action on the file with non-ASCII text", json.dumps(actions)[:400])

    # ---- A file without a compile command, a missing compiler, outside the workspace, too large. ----
    client.open(files["unlisted.cpp"])
    diagnostics = client.wait_diagnostics(uri_of(files["unlisted.cpp"]), 1, 120)
    check(any("does not list this file" in d["message"] and "inferred from" in d["message"] for d in diagnostics),
          "a file the compile database does not list: a diagnostic says whose command it is parsed with",
          json.dumps(diagnostics)[:400])
    actions = client.code_actions(files["unlisted.cpp"], 9, 120)["result"]
    check(action(actions, DISTRIBUTE) is not None and "edit" in action(actions, DISTRIBUTE),
          "and the file is served with that command, as clangd does")
    for path, needle, what in (
        (files["nodb"], "no compile_commands.json", "a file with no compile database"),
        (outside, "outside the workspace", "a file outside the workspace"),
        (files["big"], "over accel-lsp's limit", "a file over the size limit"),
    ):
        client.open(path)
        diagnostics = client.wait_diagnostics(uri_of(path), 1, 120)
        check(any(needle in d["message"] for d in diagnostics), what + ": a diagnostic says so", json.dumps(diagnostics)[:400])
        actions = client.code_actions(path, 0, 120)["result"]
        distribute = action(actions, DISTRIBUTE)
        check(distribute is not None and needle in distribute.get("disabled", {}).get("reason", ""),
              what + ": the action is disabled with the reason", json.dumps(actions)[:400])
    client.open(files["stale"])
    diagnostics = client.wait_diagnostics(uri_of(files["stale"]), 1, 120)
    check(any("/opt/gone/bin/g++-7" in d["message"] and "does not exist" in d["message"] for d in diagnostics),
          "a compile command naming a missing compiler: a diagnostic names it", json.dumps(diagnostics)[:400])
    actions = client.code_actions(files["stale"], 9, 120)["result"]
    check(action(actions, DISTRIBUTE) is not None and "edit" in action(actions, DISTRIBUTE),
          "and the file is still served with the command's flags")

    # didClose: its diagnostics are cleared.
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri_of(files["big"])}})
    cleared = client.wait_diagnostics(uri_of(files["big"]), None, 30)
    check(cleared == [], "closing a document clears its diagnostics")
    gone = client.code_actions(files["big"], 0, 30)
    check(error_code(gone) == -32602, "a request on a closed document gets InvalidParams", json.dumps(gone))


def diff(expected, actual):
    if expected == actual:
        return ""
    import difflib

    return "\n" + "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), "accel-rewrite", "lsp"))


if __name__ == "__main__":
    sys.exit(main())
