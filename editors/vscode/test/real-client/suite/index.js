// The real-client test's checks, run by VS Code itself (its `--extensionTestsPath`) inside
// the extension host, with the extension loaded from editors/vscode and the real language
// server on PATH. The extension keeps its default settings (`tessera lsp`, started by
// vscode-languageclient with `TransportKind.stdio`, which appends `--stdio`) until the
// last steps. Every step is written to $TESSERA_REAL_CLIENT_RESULT as it finishes, so that
// the driver (../real-client.test.js) can tell how far it got even when this hangs.
'use strict';

const fs = require('fs');
const path = require('path');
const vscode = require('vscode');

const resultFile = process.env.TESSERA_REAL_CLIENT_RESULT;
const binDir = process.env.TESSERA_REAL_CLIENT_BIN_DIR;
const STEP_TIMEOUT_MS = 60_000;

const result = { vscode: vscode.version, appName: vscode.env.appName, steps: [], done: false };

function save() {
    if (resultFile) {
        fs.writeFileSync(resultFile, JSON.stringify(result, null, 2));
    }
}

async function step(name, fn) {
    const started = Date.now();
    try {
        const detail = await fn();
        result.steps.push({ name, ok: true, ms: Date.now() - started, detail });
        save();
        return detail;
    } catch (e) {
        result.steps.push({ name, ok: false, ms: Date.now() - started, error: e && e.stack ? e.stack : String(e) });
        save();
        throw e;
    }
}

function check(condition, message) {
    if (!condition) {
        throw new Error(message);
    }
}

/** Resolves when `ready()` returns a value other than undefined (re-checked on `events`). */
function waitFor(what, events, ready, timeoutMs = STEP_TIMEOUT_MS) {
    return new Promise((resolve, reject) => {
        const subs = [];
        const finish = (f) => {
            clearTimeout(timer);
            subs.forEach((s) => s.dispose());
            f();
        };
        const poll = () => {
            let value;
            try {
                value = ready();
            } catch (e) {
                finish(() => reject(e));
                return;
            }
            if (value !== undefined) {
                finish(() => resolve(value));
            }
        };
        const timer = setTimeout(() => finish(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`))), timeoutMs);
        for (const event of events) {
            subs.push(event(poll));
        }
        poll();
    });
}

/** The server's state once it is `ready`; a start that ended in `error` or `stopped` throws. */
function serverReady(api, what) {
    return waitFor(`the language server to be ready (${what})`, [api.onDidChangeStatus], () => {
        const s = api.status;
        if (s.state === 'error' || s.state === 'stopped') {
            throw new Error(`the language server did not start (${what}): ${s.state}: ${s.detail || ''} [${s.command || ''}]`);
        }
        return s.state === 'ready' ? s : undefined;
    });
}

function diagnosticsOf(uri, what) {
    return waitFor(`diagnostics on ${path.basename(uri.fsPath)} (${what})`, [vscode.languages.onDidChangeDiagnostics], () => {
        const ds = vscode.languages.getDiagnostics(uri);
        return ds.length > 0 ? ds.map((d) => ({ line: d.range.start.line, code: String(d.code && (d.code.value ?? d.code)), message: d.message, source: d.source })) : undefined;
    });
}

/** Command lines (argv) of this extension host's child processes whose program is `name`. */
function childArgv(name) {
    const found = [];
    for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
        try {
            const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
            const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
            const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((a) => a !== '');
            if (ppid === process.pid && argv.length > 0 && path.basename(argv[0]) === name) {
                found.push(argv);
            }
        } catch {
            // The process ended while being read.
        }
    }
    return found;
}

async function checks() {
    const workspace = vscode.workspace.workspaceFolders[0].uri;
    const broken = vscode.Uri.joinPath(workspace, 'broken.tsr');
    const ext = vscode.extensions.getExtension('tessera-lang.tessera');
    check(ext, 'the extension tessera-lang.tessera is not loaded');
    check(!vscode.workspace.getConfiguration('tessera').inspect('server.path').globalValue, 'tessera.server.path is set: the test needs the defaults');

    await step('opening a .tsr file activates the extension', async () => {
        const doc = await vscode.workspace.openTextDocument(broken);
        await vscode.window.showTextDocument(doc);
        check(doc.languageId === 'tessera', `language ${doc.languageId}`);
        await ext.activate();
        return { active: ext.isActive };
    });
    const api = ext.exports;

    await step('the server starts with the default settings (initialize succeeds)', async () => {
        const s = await serverReady(api, 'default settings');
        const init = api.initializeResult;
        check(init && init.capabilities, 'no initialize result');
        const legend = init.capabilities.semanticTokensProvider && init.capabilities.semanticTokensProvider.legend;
        // Every modifier the server sends beyond LSP's own is one the extension declares.
        const standard = ['declaration', 'definition', 'readonly', 'static', 'deprecated', 'abstract', 'async', 'modification', 'documentation', 'defaultLibrary'];
        const declared = (ext.packageJSON.contributes.semanticTokenModifiers || []).map((m) => m.id);
        const undeclared = ((legend && legend.tokenModifiers) || []).filter((m) => !standard.includes(m) && !declared.includes(m));
        check(undeclared.length === 0, `semantic token modifiers the manifest does not declare: ${undeclared}`);
        return { status: s, serverInfo: init.serverInfo, tokenModifiers: legend && legend.tokenModifiers };
    });

    await step('vscode-languageclient ran `tessera lsp --stdio`', async () => {
        const argv = childArgv('tessera');
        check(argv.length === 1, `expected one \`tessera\` child process, found ${JSON.stringify(argv)}`);
        check(argv[0].includes('lsp') && argv[0].includes('--stdio'), `argv ${JSON.stringify(argv[0])}`);
        return { argv: argv[0].slice(1) };
    });

    await step('a diagnostic for the broken file arrives', async () => {
        const ds = await diagnosticsOf(broken, 'default settings');
        check(ds.some((d) => /undefined name/.test(d.message)), `diagnostics ${JSON.stringify(ds)}`);
        return { diagnostics: ds };
    });

    await step('Tessera: Show Server Version runs `tessera lsp --version`', async () => {
        const message = await vscode.commands.executeCommand('tessera.showServerVersion');
        check(typeof message === 'string' && /^tessera-lsp \d+\.\d+/.test(message), `message ${JSON.stringify(message)}`);
        return { message };
    });

    await step('Tessera: Stop Server, then Start Server', async () => {
        await vscode.commands.executeCommand('tessera.stopServer');
        check(api.status.state === 'stopped', `after stop: ${JSON.stringify(api.status)}`);
        await waitFor('the server process to end', [], () => (childArgv('tessera').length === 0 ? true : undefined), 10_000).catch(() => undefined);
        await vscode.commands.executeCommand('tessera.startServer');
        const s = await serverReady(api, 'after Start Server');
        const ds = await diagnosticsOf(broken, 'after Start Server');
        return { status: s, diagnostics: ds.length };
    });

    await step('the standalone tessera-lsp (tessera.server.path, no arguments)', async () => {
        check(binDir, 'TESSERA_REAL_CLIENT_BIN_DIR is not set');
        const conf = vscode.workspace.getConfiguration('tessera');
        await conf.update('server.args', [], vscode.ConfigurationTarget.Global);
        await conf.update('server.path', path.join(binDir, 'tessera-lsp'), vscode.ConfigurationTarget.Global);
        // Each of the two updates restarts the server; the first restart, with only one of
        // them made, may fail (`tessera --stdio`): wait for the one with both.
        const s = await waitFor('a restart with tessera-lsp', [api.onDidChangeStatus], () => {
            const st = api.status;
            return st.state === 'ready' && /tessera-lsp$/.test(st.command || '') ? st : undefined;
        }).catch((e) => {
            throw new Error(`${e.message}; last status ${JSON.stringify(api.status)}`);
        });
        const ds = await diagnosticsOf(broken, 'tessera-lsp');
        const argv = childArgv('tessera-lsp');
        check(argv.length === 1 && argv[0].includes('--stdio'), `argv ${JSON.stringify(argv)}`);
        await conf.update('server.path', undefined, vscode.ConfigurationTarget.Global);
        await conf.update('server.args', undefined, vscode.ConfigurationTarget.Global);
        return { status: s, argv: argv[0].slice(1), diagnostics: ds.length };
    });
}

exports.run = async function run() {
    save();
    try {
        await checks();
        result.done = true;
    } catch (e) {
        result.error = e && e.stack ? e.stack : String(e);
    } finally {
        save();
    }
    if (result.error) {
        throw new Error(result.error);
    }
};
