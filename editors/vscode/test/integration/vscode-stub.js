// A small stand-in for the `vscode` module, enough to activate the extension under plain Node
// with the real vscode-languageclient talking to a real (fake) server process. It is not
// VS Code: UI calls are recorded in `stub.calls`, quick picks are answered by
// `stub.answers.quickPick`, and anything not modelled here is a no-op returning a Disposable
// (functions) or a placeholder class / enum (capitalized names).
'use strict';

const path = require('path');
const { URL } = require('url');

const calls = []; // [name, ...args]
const answers = { quickPick: (items) => items[0] };
const commands = new Map();
const contentProviders = new Map();
const settings = new Map(); // 'tessera.server.path' -> value
const textDocuments = [];
const terminals = [];
const statusBarItems = [];

class Disposable {
    constructor(fn) {
        this._fn = fn;
    }
    static from(...ds) {
        return new Disposable(() => ds.forEach((d) => d && d.dispose && d.dispose()));
    }
    dispose() {
        if (this._fn) this._fn();
        this._fn = undefined;
    }
}

class EventEmitter {
    constructor() {
        this._listeners = [];
        this.event = (listener) => {
            this._listeners.push(listener);
            return new Disposable(() => {
                this._listeners = this._listeners.filter((l) => l !== listener);
            });
        };
    }
    fire(e) {
        for (const l of [...this._listeners]) l(e);
    }
    dispose() {
        this._listeners = [];
    }
}

function encodePath(p) {
    return p
        .split('/')
        .map((s) => encodeURIComponent(s).replace(/%3A/gi, ':'))
        .join('/');
}

class Uri {
    constructor(scheme, authority, p, query, fragment) {
        this.scheme = scheme;
        this.authority = authority || '';
        this.path = p || '';
        this.query = query || '';
        this.fragment = fragment || '';
    }
    static parse(value) {
        const m = /^([a-zA-Z][\w+.-]*):(?:\/\/([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$/.exec(value);
        if (!m) throw new Error(`bad uri ${value}`);
        const dec = (s) => (s ? decodeURIComponent(s) : '');
        return new Uri(m[1], dec(m[2]), dec(m[3]), dec(m[4]), dec(m[5]));
    }
    static file(p) {
        return new Uri('file', '', path.resolve(p));
    }
    static from(c) {
        return new Uri(c.scheme, c.authority, c.path, c.query, c.fragment);
    }
    get fsPath() {
        return this.path;
    }
    with(change) {
        return new Uri(
            change.scheme ?? this.scheme,
            change.authority ?? this.authority,
            change.path ?? this.path,
            change.query ?? this.query,
            change.fragment ?? this.fragment,
        );
    }
    toString() {
        let s = `${this.scheme}:`;
        if (this.authority || this.scheme === 'file') s += `//${encodeURIComponent(this.authority)}`;
        s += encodePath(this.path);
        if (this.query) s += `?${encodeURIComponent(this.query)}`;
        if (this.fragment) s += `#${encodeURIComponent(this.fragment)}`;
        return s;
    }
    toJSON() {
        return this.toString();
    }
}

class Position {
    constructor(line, character) {
        this.line = line;
        this.character = character;
    }
}

class Range {
    constructor(a, b, c, d) {
        if (typeof a === 'number') {
            this.start = new Position(a, b);
            this.end = new Position(c, d);
        } else {
            this.start = a;
            this.end = b;
        }
    }
}

class Selection extends Range {
    constructor(...args) {
        super(...args);
        this.anchor = this.start;
        this.active = this.end;
    }
}

function makeDocument(uri, languageId, text) {
    const lines = text.split('\n');
    return {
        uri,
        fileName: uri.fsPath,
        languageId,
        version: 1,
        isDirty: false,
        isClosed: false,
        isUntitled: uri.scheme === 'untitled',
        eol: 1,
        lineCount: lines.length,
        getText: () => text,
        lineAt: (l) => ({ text: lines[l], range: new Range(l, 0, l, lines[l].length) }),
        save: async () => true,
    };
}

function genericClass(name) {
    const C = class {
        constructor(...args) {
            this._args = args;
        }
    };
    Object.defineProperty(C, 'name', { value: name });
    // Enums are read as properties: any member is a number.
    return new Proxy(C, {
        get(target, prop, receiver) {
            if (prop in target || typeof prop !== 'string') return Reflect.get(target, prop, receiver);
            return 1;
        },
    });
}

function namespace(name, members) {
    return new Proxy(members, {
        get(target, prop) {
            if (prop in target || typeof prop !== 'string') return target[prop];
            // Events (onDidX), registrations (registerX) and everything else: a no-op.
            return (...args) => {
                calls.push([`${name}.${prop}`, ...args]);
                return new Disposable();
            };
        },
    });
}

const outputLines = [];
const outputChannels = [];
function outputChannel(name) {
    outputChannels.push(name);
    return {
        name,
        append: (s) => outputLines.push(s),
        appendLine: (s) => outputLines.push(s),
        replace: () => undefined,
        clear: () => undefined,
        show: () => undefined,
        hide: () => undefined,
        dispose: () => undefined,
    };
}

const window = namespace('window', {
    activeTextEditor: undefined,
    visibleTextEditors: [],
    createOutputChannel: outputChannel,
    createTextEditorDecorationType: () => new Disposable(),
    createStatusBarItem: (id, alignment, priority) => {
        const item = {
            id,
            alignment,
            priority,
            text: '',
            tooltip: undefined,
            command: undefined,
            backgroundColor: undefined,
            visible: false,
            show() {
                this.visible = true;
            },
            hide() {
                this.visible = false;
            },
            dispose() {
                this.visible = false;
            },
        };
        statusBarItems.push(item);
        return item;
    },
    showErrorMessage: async (...args) => {
        calls.push(['showErrorMessage', ...args]);
        return undefined;
    },
    showWarningMessage: async (...args) => {
        calls.push(['showWarningMessage', ...args]);
        return undefined;
    },
    showInformationMessage: async (...args) => {
        calls.push(['showInformationMessage', ...args]);
        return undefined;
    },
    setStatusBarMessage: (...args) => {
        calls.push(['setStatusBarMessage', ...args]);
        return new Disposable();
    },
    showQuickPick: async (items, options) => {
        const list = await items;
        calls.push(['showQuickPick', list, options]);
        return answers.quickPick(list, options);
    },
    withProgress: async (_options, task) => task({ report: () => undefined }, { isCancellationRequested: false }),
    showTextDocument: async (doc, options) => {
        calls.push(['showTextDocument', doc, options]);
        return { document: doc };
    },
    createTerminal: (options) => {
        const t = {
            name: options.name,
            options,
            sent: [],
            exitStatus: undefined,
            sendText(text) {
                this.sent.push(text);
            },
            show() {},
            dispose() {
                this.disposed = true;
            },
        };
        terminals.push(t);
        return t;
    },
});

const workspace = namespace('workspace', {
    workspaceFolders: undefined,
    textDocuments,
    getConfiguration: (section) => ({
        get: (key, dflt) => {
            const full = section ? `${section}.${key}` : key;
            return settings.has(full) ? settings.get(full) : dflt;
        },
        has: (key) => settings.has(section ? `${section}.${key}` : key),
        inspect: () => undefined,
        update: async () => undefined,
    }),
    getWorkspaceFolder: () => undefined,
    createFileSystemWatcher: () => ({
        onDidCreate: () => new Disposable(),
        onDidChange: () => new Disposable(),
        onDidDelete: () => new Disposable(),
        dispose: () => undefined,
    }),
    registerTextDocumentContentProvider: (scheme, provider) => {
        contentProviders.set(scheme, provider);
        return new Disposable(() => contentProviders.delete(scheme));
    },
    openTextDocument: async (uri) => {
        const open = textDocuments.find((d) => d.uri.toString() === uri.toString());
        if (open) return open;
        const provider = contentProviders.get(uri.scheme);
        if (!provider) throw new Error(`cannot open ${uri.toString()}`);
        const text = await provider.provideTextDocumentContent(uri, { isCancellationRequested: false });
        const doc = makeDocument(uri, 'plaintext', text);
        textDocuments.push(doc);
        return doc;
    },
});

const languages = namespace('languages', {
    match: (selector, doc) => {
        const sels = Array.isArray(selector) ? selector : [selector];
        return sels.some((s) => (typeof s === 'string' ? s === doc.languageId : (!s.language || s.language === doc.languageId) && (!s.scheme || s.scheme === doc.uri.scheme)))
            ? 10
            : 0;
    },
    setTextDocumentLanguage: async (doc, languageId) => {
        doc.languageId = languageId;
        return doc;
    },
    createDiagnosticCollection: (name) => ({
        name,
        set: () => undefined,
        delete: () => undefined,
        clear: () => undefined,
        forEach: () => undefined,
        get: () => undefined,
        has: () => false,
        dispose: () => undefined,
    }),
});

const vscodeCommands = namespace('commands', {
    registerCommand: (id, fn) => {
        if (commands.has(id)) {
            // As in VS Code.
            throw new Error(`command '${id}' already exists`);
        }
        commands.set(id, fn);
        return new Disposable(() => commands.delete(id));
    },
    executeCommand: async (id, ...args) => {
        const fn = commands.get(id);
        if (!fn) {
            calls.push(['executeCommand', id, ...args]);
            return undefined;
        }
        return fn(...args);
    },
    getCommands: async () => [...commands.keys()],
});

const env = namespace('env', {
    appName: 'Visual Studio Code (stub)',
    language: 'en',
    shell: '/bin/bash',
    machineId: 'stub',
    sessionId: 'stub',
    uiKind: 1,
});

const explicit = {
    version: '1.82.0',
    Disposable,
    EventEmitter,
    Uri,
    Position,
    Range,
    Selection,
    window,
    workspace,
    languages,
    commands: vscodeCommands,
    env,
    extensions: namespace('extensions', { all: [], getExtension: () => undefined }),
    ViewColumn: { Active: -1, Beside: -2, One: 1, Two: 2 },
    ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
    TextEditorRevealType: { Default: 0, InCenter: 1, InCenterIfOutsideViewport: 2, AtTop: 3 },
    ThemeColor: class ThemeColor {
        constructor(id) {
            this.id = id;
        }
    },
};

const vscode = new Proxy(explicit, {
    get(target, prop) {
        if (prop in target || typeof prop !== 'string') return target[prop];
        if (/^[A-Z]/.test(prop)) {
            target[prop] = genericClass(prop);
            return target[prop];
        }
        target[prop] = namespace(prop, {});
        return target[prop];
    },
});

/** Makes `require('vscode')` return this stub. */
function install() {
    const Module = require('module');
    const orig = Module._resolveFilename;
    Module._resolveFilename = function (request, ...rest) {
        if (request === 'vscode') return __filename;
        return orig.call(this, request, ...rest);
    };
    require.cache[__filename].exports = vscode;
}

module.exports = {
    install,
    vscode,
    stub: { calls, answers, commands, settings, textDocuments, terminals, statusBarItems, outputLines, outputChannels, makeDocument, contentProviders },
};
