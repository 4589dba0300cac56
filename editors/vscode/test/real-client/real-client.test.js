// The extension in a real VS Code against the real language server, with the extension's
// default settings: the workbench (VS Code 1.100, the build that the code-server npm package
// ships) runs in headless Chromium, its extension host runs the compiled extension
// (out/extension.js) with the real vscode-languageclient, which starts `tessera lsp` from
// PATH exactly as it does for a user. ./suite/index.js, run inside that extension host,
// checks that `initialize` succeeds, that the client passed `--stdio`, that a diagnostic
// for a broken .tsr file arrives, and the server commands.
//
// This is the test that catches a server refusing the arguments vscode-languageclient
// appends (`--stdio`): the fake server of the other tests is not the real one.
//
// Needs: the binaries `tessera` and `tessera-lsp` (in the directory of $TESSERA_LSP, else
// ${CARGO_TARGET_DIR:-<repo>/target}/debug: `cargo build --bin tessera --bin tessera-lsp`),
// Chromium ($CHROMIUM, else `chromium` on PATH: `apt-get install chromium`), and VS Code,
// which ./install-host.sh installs from npm on the first run. Skipped when one is missing,
// except under CI=true, where a missing one fails the test.
'use strict';

const assert = require('node:assert/strict');
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { test } = require('node:test');

const here = __dirname;
const extRoot = path.resolve(here, '..', '..');
const repoRoot = path.resolve(extRoot, '..', '..');
const vscodeDir = path.join(here, 'host', 'node_modules', 'code-server', 'lib', 'vscode');
const inCI = process.env.CI === 'true' || process.env.CI === '1';
/** Start-up of VS Code and Chromium, then every step of the suite (a minute each at most). */
const OVERALL_TIMEOUT_MS = 6 * 60_000;

function binDir() {
    if (process.env.TESSERA_LSP) {
        return path.dirname(path.resolve(process.env.TESSERA_LSP));
    }
    return path.join(process.env.CARGO_TARGET_DIR ? path.resolve(process.env.CARGO_TARGET_DIR) : path.join(repoRoot, 'target'), 'debug');
}

function onPath(name) {
    for (const dir of (process.env.PATH || '').split(path.delimiter)) {
        const p = path.join(dir, name);
        try {
            fs.accessSync(p, fs.constants.X_OK);
            return p;
        } catch {
            // not here
        }
    }
    return undefined;
}

function findChromium() {
    if (process.env.CHROMIUM) {
        return fs.existsSync(process.env.CHROMIUM) ? process.env.CHROMIUM : onPath(process.env.CHROMIUM);
    }
    return ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'].map(onPath).find(Boolean);
}

/** What is missing to run the test, as a list of hints; empty when everything is there. */
function missing(bins, chromium) {
    const out = [];
    for (const name of ['tessera', 'tessera-lsp']) {
        if (!fs.existsSync(path.join(bins, name))) {
            out.push(`${path.join(bins, name)} (cargo build --bin tessera --bin tessera-lsp, or set TESSERA_LSP)`);
        }
    }
    if (!chromium) {
        out.push('Chromium (apt-get install chromium, or set CHROMIUM)');
    }
    if (!fs.existsSync(path.join(extRoot, 'out', 'extension.js'))) {
        out.push(`${path.join(extRoot, 'out', 'extension.js')} (npm run compile)`);
    }
    return out;
}

/** Ends a process started with `detached: true` and everything it started. */
function killGroup(child) {
    if (child && child.exitCode === null && child.signalCode === null) {
        try {
            process.kill(-child.pid, 'SIGKILL');
        } catch {
            // Already gone.
        }
    }
}

function readIfThere(file) {
    try {
        return fs.readFileSync(file, 'utf8');
    } catch {
        return undefined;
    }
}

/** The logs a failure should show: VS Code's server, the extension host, the extension's output channels. */
function logsUnder(dir) {
    const out = [];
    const walk = (d) => {
        for (const e of fs.existsSync(d) ? fs.readdirSync(d, { withFileTypes: true }) : []) {
            const p = path.join(d, e.name);
            if (e.isDirectory()) {
                walk(p);
            } else if (/Tessera|exthost\.log|remoteagent\.log/.test(e.name)) {
                out.push(`--- ${path.relative(dir, p)}\n${readIfThere(p)}`);
            }
        }
    };
    walk(dir);
    return out.join('\n');
}

test('the extension in VS Code starts the real language server with its default settings', { timeout: OVERALL_TIMEOUT_MS + 30_000 }, async (t) => {
    const bins = binDir();
    const chromium = findChromium();
    const lacking = missing(bins, chromium);
    if (lacking.length > 0) {
        const message = `missing: ${lacking.join('; ')}`;
        if (inCI) {
            assert.fail(`CI=true: the real-client test cannot be skipped; ${message}`);
        }
        t.skip(message);
        return;
    }

    const install = spawnSync('bash', [path.join(here, 'install-host.sh')], { stdio: 'inherit' });
    assert.equal(install.status, 0, 'install-host.sh failed (see above)');

    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-real-client-'));
    const workspace = path.join(tmp, 'workspace');
    fs.mkdirSync(path.join(workspace, '.vscode'), { recursive: true });
    fs.writeFileSync(
        path.join(workspace, 'broken.tsr'),
        ['@kernel', 'def broken(A: Tensor["M", f32]):', '    x = undefined_name + 1', ''].join('\n'),
    );
    // Workspace settings that keep VS Code from reaching for the network; none is the
    // extension's: it runs with its defaults.
    fs.writeFileSync(
        path.join(workspace, '.vscode', 'settings.json'),
        JSON.stringify({
            'extensions.autoCheckUpdates': false,
            'extensions.autoUpdate': false,
            'extensions.ignoreRecommendations': true,
            'telemetry.telemetryLevel': 'off',
            'update.mode': 'none',
            'workbench.enableExperiments': false,
            'workbench.startupEditor': 'none',
        }),
    );
    const resultFile = path.join(tmp, 'result.json');
    const serverData = path.join(tmp, 'server-data');

    // The binaries are found the way a user's are: `tessera` on PATH.
    const env = {
        ...process.env,
        PATH: `${bins}${path.delimiter}${process.env.PATH || ''}`,
        TESSERA_REAL_CLIENT_RESULT: resultFile,
        TESSERA_REAL_CLIENT_BIN_DIR: bins,
        // No extension gallery: it is not on the loopback, and nothing here needs it.
        EXTENSIONS_GALLERY: JSON.stringify({ serviceUrl: '' }),
    };
    const server = spawn(
        process.execPath,
        [
            path.join(vscodeDir, 'out', 'server-main.js'),
            '--host', '127.0.0.1',
            '--port', '0',
            '--without-connection-token',
            '--accept-server-license-terms',
            '--disable-workspace-trust',
            // The extension host gets this process's environment (PATH with the binaries),
            // not one read from root's login shell, whose /etc/profile sets PATH afresh.
            '--force-disable-user-env',
            '--telemetry-level', 'off',
            '--server-data-dir', serverData,
            '--extensions-dir', path.join(tmp, 'extensions'),
        ],
        { env, cwd: tmp, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let serverLog = '';
    let chrome;
    let chromeLog = '';
    t.after(() => {
        killGroup(chrome);
        killGroup(server);
        fs.rmSync(tmp, { recursive: true, force: true });
    });

    const port = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`VS Code's server did not start:\n${serverLog}`)), 60_000);
        const onData = (chunk) => {
            serverLog += chunk;
            const m = /Extension host agent listening on (\d+)/.exec(serverLog);
            if (m) {
                clearTimeout(timer);
                resolve(Number(m[1]));
            }
        };
        server.stdout.on('data', onData);
        server.stderr.on('data', onData);
        server.on('exit', (code) => {
            clearTimeout(timer);
            reject(new Error(`VS Code's server exited (${code}):\n${serverLog}`));
        });
    });

    // The extension under development and the suite, as the web workbench takes them: a
    // `payload` of the URL, with paths on the server (`vscode-remote://`).
    const remote = (p) => `vscode-remote://127.0.0.1:${port}${p.split(path.sep).map(encodeURIComponent).join('/')}`;
    const payload = [
        ['extensionDevelopmentPath', remote(extRoot)],
        ['extensionTestsPath', remote(path.join(here, 'suite', 'index.js'))],
        ['skipWelcome', 'true'],
    ];
    const url = `http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}&payload=${encodeURIComponent(JSON.stringify(payload))}`;
    const chromeArgs = [
        '--headless=new',
        '--disable-gpu',
        '--no-first-run',
        '--no-default-browser-check',
        '--disable-dev-shm-usage',
        `--user-data-dir=${path.join(tmp, 'chromium')}`,
        url,
    ];
    if (process.getuid && process.getuid() === 0) {
        // Chromium's sandbox refuses to run as root.
        chromeArgs.unshift('--no-sandbox');
    }
    chrome = spawn(chromium, chromeArgs, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    chrome.stdout.on('data', (c) => (chromeLog += c));
    chrome.stderr.on('data', (c) => (chromeLog += c));

    // The suite writes its result as it goes and sets `done` (or `error`) at the end.
    const result = await new Promise((resolve) => {
        const started = Date.now();
        const timer = setInterval(() => {
            const text = readIfThere(resultFile);
            let r;
            try {
                r = text ? JSON.parse(text) : undefined;
            } catch {
                return; // being written
            }
            const over = Date.now() - started > OVERALL_TIMEOUT_MS;
            const gone = chrome.exitCode !== null || server.exitCode !== null;
            if ((r && (r.done || r.error)) || over || gone) {
                clearInterval(timer);
                resolve(r ?? { steps: [], error: over ? 'timed out before the suite started' : 'VS Code or Chromium exited before the suite started' });
            }
        }, 250);
    });
    server.stdout.removeAllListeners('data');

    for (const s of result.steps) {
        t.diagnostic(`${s.ok ? 'ok' : 'FAILED'} ${s.name} (${s.ms} ms)${s.detail ? ' ' + JSON.stringify(s.detail) : ''}`);
    }
    if (!result.done) {
        const logs = [
            `result: ${JSON.stringify(result, null, 2)}`,
            `--- VS Code server\n${serverLog}`,
            logsUnder(path.join(serverData, 'data', 'logs')),
            `--- Chromium (last 3000 characters)\n${chromeLog.slice(-3000)}`,
        ].join('\n');
        assert.fail(`the suite in VS Code failed: ${result.error || 'no result'}\n${logs}`);
    }
    assert.match(result.vscode, /^1\.\d+\.\d+$/);
    const names = result.steps.map((s) => s.name);
    assert.ok(names.includes('a diagnostic for the broken file arrives'), names.join(', '));
    assert.ok(result.steps.every((s) => s.ok));
});
