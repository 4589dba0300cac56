import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import * as logic from '../logic';

const pos = (line: number, character: number): logic.Position => ({ line, character });
const range = (l1: number, c1: number, l2: number, c2: number): logic.Range => ({
    start: pos(l1, c1),
    end: pos(l2, c2),
});
const kernel = (name: string, r: logic.Range, kind = 'kernel'): logic.KernelInfo => ({ name, kind, range: r });

describe('pickKernelAt', () => {
    const kernels = [
        kernel('gemm', range(4, 0, 24, 12), 'kernel.autotune'),
        kernel('small', range(27, 0, 35, 40), 'kernel.schedule'),
        kernel('loss', range(40, 0, 45, 0), 'jit'),
    ];

    it('finds the kernel whose range contains the cursor', () => {
        assert.equal(logic.pickKernelAt(kernels, pos(10, 5))?.name, 'gemm');
        assert.equal(logic.pickKernelAt(kernels, pos(27, 0))?.name, 'small');
        assert.equal(logic.pickKernelAt(kernels, pos(35, 40))?.name, 'small', 'end is inclusive');
        assert.equal(logic.pickKernelAt(kernels, pos(44, 3))?.name, 'loss');
    });

    it('returns undefined between kernels (the caller asks)', () => {
        assert.equal(logic.pickKernelAt(kernels, pos(25, 0)), undefined);
        assert.equal(logic.pickKernelAt(kernels, pos(0, 0)), undefined);
        assert.equal(logic.pickKernelAt(kernels, pos(100, 0)), undefined);
        assert.equal(logic.pickKernelAt([], pos(1, 1)), undefined);
    });

    it('prefers the innermost of nested ranges', () => {
        const nested = [kernel('outer', range(0, 0, 50, 0)), kernel('inner', range(10, 0, 20, 0))];
        assert.equal(logic.pickKernelAt(nested, pos(15, 0))?.name, 'inner');
        assert.equal(logic.pickKernelAt(nested, pos(30, 0))?.name, 'outer');
    });

    it('with header-only ranges, takes the last kernel starting at or before the cursor', () => {
        const headers = [kernel('b', range(20, 4, 20, 9)), kernel('a', range(3, 4, 3, 8))];
        assert.equal(logic.pickKernelAt(headers, pos(10, 0))?.name, 'a');
        assert.equal(logic.pickKernelAt(headers, pos(20, 0))?.name, 'b');
        assert.equal(logic.pickKernelAt(headers, pos(99, 0))?.name, 'b');
        assert.equal(logic.pickKernelAt(headers, pos(1, 0)), undefined);
    });
});

describe('sortKernels', () => {
    it('orders by start without mutating the input', () => {
        const input = [kernel('b', range(9, 0, 9, 1)), kernel('a', range(2, 0, 2, 1))];
        assert.deepEqual(
            logic.sortKernels(input).map((k) => k.name),
            ['a', 'b'],
        );
        assert.equal(input[0].name, 'b');
    });
});

describe('scanKernels (fallback without a server)', () => {
    const src = [
        '# header', //                                       0
        'import tessera as ts', //                           1
        'BLOCK = 128', //                                    2
        '', //                                               3
        '@ts.kernel.autotune(', //                           4
        '    space=dict(BM=[64, 128]),', //                  5
        '    metric="latency_ms")', //                       6
        'def gemm(A: Tensor["M", "K", bf16],', //            7
        '         B: Tensor["K", "N", bf16]):', //           8
        '    ctx = tile.context()', //                       9
        '', //                                               10
        '    return B', //                                   11
        '', //                                               12
        'def helper(x):', //                                 13
        '    return x', //                                   14
        '', //                                               15
        '@jit @autodiff', //                                 16
        'def loss(x: Tensor[f32]) -> Tensor[f32]:', //       17
        '    return x', //                                   18
        '@kernel', //                                        19
        'def saxpy(x: Tensor["n", f32]):', //                20
        '    pass', //                                       21
    ].join('\n');

    it('finds decorated kernels and graph functions, not helpers', () => {
        const ks = logic.scanKernels(src);
        assert.deepEqual(
            ks.map((k) => [k.name, k.kind, k.range.start.line, k.range.end.line]),
            [
                ['gemm', 'kernel.autotune', 4, 11],
                ['loss', 'jit', 16, 18],
                ['saxpy', 'kernel', 19, 21],
            ],
        );
        assert.equal(logic.pickKernelAt(ks, pos(10, 0))?.name, 'gemm');
        assert.equal(logic.pickKernelAt(ks, pos(14, 0)), undefined);
    });

    it('handles CRLF line ends and schedule decorators', () => {
        const ks = logic.scanKernels('@kernel.schedule(block(64, 64))\r\ndef k(a: f32):\r\n    pass\r\n');
        assert.deepEqual(
            ks.map((k) => [k.name, k.kind]),
            [['k', 'kernel.schedule']],
        );
    });
});

describe('parseKernelArgs', () => {
    it('accepts [uri, kernel] and rejects anything else', () => {
        assert.deepEqual(logic.parseKernelArgs(['file:///a.tsr', 'gemm']), { uri: 'file:///a.tsr', kernel: 'gemm' });
        assert.equal(logic.parseKernelArgs([]), undefined);
        assert.equal(logic.parseKernelArgs(['file:///a.tsr']), undefined);
        assert.equal(logic.parseKernelArgs([1, 'gemm']), undefined);
        assert.equal(logic.parseKernelArgs(['file:///a.tsr', '']), undefined);
    });
});

describe('IR document URIs', () => {
    it('round-trips every key, including awkward file names', () => {
        const sources = [
            'file:///home/u/kernels/gemm.tsr',
            'file:///home/u/my%20kernels/it%27s%20%22quoted%22.tsr',
            'file:///c%3A/Users/Jo%C3%ABl/a%26b%3Dc%23d.tsr',
            'untitled:Untitled-1',
        ];
        for (const source of sources) {
            for (const stage of ['graph', 'sched', 'tile', 'target', 'all'] as const) {
                const key = { source, kernel: 'flash_attention', stage, target: 'sm_80' };
                const enc = logic.encodeIrUri(key);
                assert.equal(enc.scheme, logic.IR_SCHEME);
                assert.deepEqual(logic.decodeIrUri(enc), key);
                // VS Code hands the query back decoded exactly as given to Uri.from.
                assert.deepEqual(logic.decodeIrUri({ query: enc.query }), key);
            }
        }
    });

    it('names the document after the source file and kernel', () => {
        const enc = logic.encodeIrUri({
            source: 'file:///x/my%20kernels/gemm%20v2.tsr',
            kernel: 'gemm',
            stage: 'tile',
            target: 'sm_90',
        });
        assert.equal(enc.path, '/gemm v2.tsr/gemm.tile.sm_90.tir');
    });

    it('rejects foreign or incomplete URIs', () => {
        assert.equal(logic.decodeIrUri({ scheme: 'file', query: '' }), undefined);
        assert.equal(logic.decodeIrUri({ query: 'source=a&kernel=k&stage=bogus&target=sm_90' }), undefined);
        assert.equal(logic.decodeIrUri({ query: 'kernel=k&stage=tile&target=sm_90' }), undefined);
    });

    it('sourceBaseName decodes and never yields separators', () => {
        assert.equal(logic.sourceBaseName('file:///a/b%2Fc.tsr'), 'b_c.tsr');
        assert.equal(logic.sourceBaseName('file:///a/%E0%A4%A.tsr'), '%E0%A4%A.tsr');
        assert.equal(logic.sourceBaseName('untitled:Untitled-1'), 'untitled:Untitled-1');
    });
});

describe('source maps', () => {
    const map: logic.SourceMapEntry[] = [
        { irLine: 0, range: range(3, 0, 3, 20) },
        { irLine: 1, range: range(5, 4, 5, 30) },
        { irLine: 1, range: range(5, 4, 5, 30) },
        { irLine: 1, range: range(4, 0, 4, 2) },
        { irLine: 2, range: range(5, 10, 5, 14) },
    ];

    it('maps a source position to every IR line it produced', () => {
        assert.deepEqual(logic.irLinesForSourcePosition(map, pos(5, 12)), [1, 2]);
        assert.deepEqual(logic.irLinesForSourcePosition(map, pos(5, 5)), [1]);
        assert.deepEqual(logic.irLinesForSourcePosition(map, pos(9, 0)), []);
    });

    it('maps an IR line to its source ranges, deduplicated and ordered', () => {
        assert.deepEqual(logic.sourceRangesForIrLine(map, 1), [range(4, 0, 4, 2), range(5, 4, 5, 30)]);
        assert.deepEqual(logic.sourceRangesForIrLine(map, 7), []);
    });
});

describe('shell quoting', () => {
    it('detects the shell kind', () => {
        assert.equal(logic.shellKindFor('/bin/bash', 'linux'), 'posix');
        assert.equal(logic.shellKindFor('/usr/bin/fish', 'darwin'), 'posix');
        assert.equal(logic.shellKindFor('C:\\Program Files\\PowerShell\\7\\pwsh.exe', 'win32'), 'powershell');
        assert.equal(logic.shellKindFor('C:\\WINDOWS\\System32\\WindowsPowerShell\\v1.0\\powershell.exe', 'win32'), 'powershell');
        assert.equal(logic.shellKindFor('C:\\Windows\\System32\\cmd.exe', 'win32'), 'cmd');
        assert.equal(logic.shellKindFor('C:\\Program Files\\Git\\bin\\bash.exe', 'win32'), 'posix');
        assert.equal(logic.shellKindFor('', 'win32'), 'powershell');
        assert.equal(logic.shellKindFor(undefined, 'linux'), 'posix');
    });

    it('leaves plain words alone', () => {
        for (const kind of ['posix', 'powershell', 'cmd'] as const) {
            assert.equal(logic.quoteArg('--kernel', kind), '--kernel');
            assert.equal(logic.quoteArg('flash_attention', kind), 'flash_attention');
            assert.equal(logic.quoteArg('src/gemm.tsr', kind), 'src/gemm.tsr');
        }
    });

    it('quotes for POSIX shells', () => {
        assert.equal(logic.quoteArg('/home/u/my kernels/gemm.tsr', 'posix'), `'/home/u/my kernels/gemm.tsr'`);
        assert.equal(logic.quoteArg(`it's "x".tsr`, 'posix'), `'it'\\''s "x".tsr'`);
        assert.equal(logic.quoteArg('', 'posix'), `''`);
        assert.equal(logic.quoteArg('$HOME`id`;rm', 'posix'), `'$HOME\`id\`;rm'`);
        assert.equal(logic.quoteArg('~/a.tsr', 'posix'), `'~/a.tsr'`);
        assert.equal(logic.quoteArg('=cmd', 'posix'), `'=cmd'`);
        assert.equal(logic.quoteArg('M=1024,N=512', 'posix'), 'M=1024,N=512');
        assert.equal(logic.quoteArg('naïve.tsr', 'posix'), `'naïve.tsr'`);
    });

    it('quotes for PowerShell', () => {
        assert.equal(logic.quoteArg('C:\\my kernels\\gemm.tsr', 'powershell'), `'C:\\my kernels\\gemm.tsr'`);
        assert.equal(logic.quoteArg(`it's.tsr`, 'powershell'), `'it''s.tsr'`);
        assert.equal(logic.quoteArg('M=1024,N=512', 'powershell'), `'M=1024,N=512'`);
        assert.equal(logic.quoteArg('@args', 'powershell'), `'@args'`);
        assert.equal(logic.quoteArg('$env:X', 'powershell'), `'$env:X'`);
        assert.equal(logic.quoteArg('--%', 'powershell'), `'--%'`);
    });

    it('quotes for cmd.exe', () => {
        assert.equal(logic.quoteArg('C:\\my kernels\\gemm.tsr', 'cmd'), `"C:\\my kernels\\gemm.tsr"`);
        assert.equal(logic.quoteArg('a&b', 'cmd'), `"a&b"`);
        assert.equal(logic.quoteArg('say "hi"', 'cmd'), `"say ""hi"""`);
    });

    it('builds whole command lines', () => {
        const argv = logic.exploreArgv('/opt/tessera tools/tessera-explore', "/w/it's here/gemm.tsr", 'gemm');
        assert.deepEqual(argv, ['/opt/tessera tools/tessera-explore', "/w/it's here/gemm.tsr", '--kernel', 'gemm']);
        assert.equal(
            logic.buildCommandLine(argv, 'posix'),
            `'/opt/tessera tools/tessera-explore' '/w/it'\\''s here/gemm.tsr' --kernel gemm`,
        );
        assert.equal(
            logic.buildCommandLine(argv, 'powershell'),
            `& '/opt/tessera tools/tessera-explore' '/w/it''s here/gemm.tsr' --kernel gemm`,
        );
        assert.equal(
            logic.buildCommandLine(['C:\\Tessera\\tessera.exe', 'run', 'C:\\k\\a b.tsr', '--kernel', 'k'], 'cmd'),
            `C:\\Tessera\\tessera.exe run "C:\\k\\a b.tsr" --kernel k`,
        );
        assert.throws(() => logic.buildCommandLine([], 'posix'));
    });

    it('POSIX command lines survive a real shell unchanged', () => {
        const nasty = ['/tmp/echo args', `it's`, 'a "b" c', '$HOME', '`id`', '~', '*', 'x;y', 'naïve', '', '=z', '\\n'];
        const line = logic.buildCommandLine(['printf', '%s\\0', ...nasty], 'posix');
        const out = spawnSync('/bin/sh', ['-c', line], { encoding: 'utf8' });
        assert.equal(out.status, 0, out.stderr);
        assert.deepEqual(out.stdout.split('\0').slice(0, -1), nasty);
    });
});

describe('argv for the explorer and the runner', () => {
    it('uses `tessera explore` when the explorer setting is the CLI', () => {
        assert.deepEqual(logic.exploreArgv('tessera', 'a.tsr', 'k'), ['tessera', 'explore', 'a.tsr', '--kernel', 'k']);
        assert.deepEqual(logic.exploreArgv('C:\\bin\\tessera.exe', 'a.tsr', 'k'), [
            'C:\\bin\\tessera.exe',
            'explore',
            'a.tsr',
            '--kernel',
            'k',
        ]);
        assert.deepEqual(logic.exploreArgv('', 'a.tsr', 'k'), ['tessera-explore', 'a.tsr', '--kernel', 'k']);
    });

    it('builds `tessera run FILE --kernel NAME [extra]`', () => {
        assert.deepEqual(logic.runArgv('tessera', 'a.tsr', 'k', ['--dims', 'M=64']), [
            'tessera',
            'run',
            'a.tsr',
            '--kernel',
            'k',
            '--dims',
            'M=64',
        ]);
    });

    it('finds the CLI for Run', () => {
        assert.equal(logic.resolveCliPath('/x/tessera', 'tessera-lsp', 'linux'), '/x/tessera');
        assert.equal(logic.resolveCliPath('', '/opt/t/bin/tessera', 'linux'), '/opt/t/bin/tessera');
        assert.equal(logic.resolveCliPath('', '/opt/t/bin/tessera-lsp', 'linux'), '/opt/t/bin/tessera');
        assert.equal(logic.resolveCliPath('', 'C:\\t\\tessera-lsp.exe', 'win32'), 'C:\\t\\tessera.exe');
        assert.equal(logic.resolveCliPath('', 'tessera-lsp', 'linux'), 'tessera');
        assert.equal(logic.resolveCliPath('  ', 'something-else', 'linux'), 'tessera');
    });

    it('expands ~ and ${workspaceFolder}', () => {
        const vars = { home: '/home/u', workspaceFolder: '/w/proj' };
        assert.equal(logic.expandPath('~/bin/tessera', vars), '/home/u/bin/tessera');
        assert.equal(logic.expandPath('${workspaceFolder}/target/debug/tessera', vars), '/w/proj/target/debug/tessera');
        assert.equal(logic.expandPath('${userHome}/x', vars), '/home/u/x');
        assert.equal(logic.expandPath('${workspaceFolder}/x', { home: '/h' }), '${workspaceFolder}/x');
        assert.equal(logic.expandPath('tessera', vars), 'tessera');
        assert.equal(logic.expandPath('a~b', vars), 'a~b');
    });
});

describe('stages and targets', () => {
    it('knows the protocol values', () => {
        assert.deepEqual(
            logic.STAGES.map((s) => s.stage),
            ['graph', 'sched', 'tile', 'target', 'all'],
        );
        assert.ok(logic.isStage('tile'));
        assert.ok(!logic.isStage('Tile'));
        assert.ok(logic.isTarget('sm_80') && logic.isTarget('sm_90') && logic.isTarget('cpu'));
        assert.ok(!logic.isTarget('sm_100'));
    });
});

describe('statusPresentation', () => {
    it('shows each state with its icon, words and background', () => {
        const cases: Array<[logic.ServerState, string, RegExp, 'error' | 'warning' | undefined]> = [
            ['starting', '$(loading~spin) Tessera', /^Tessera language server: starting$/m, undefined],
            ['ready', '$(check) Tessera', /^Tessera language server: ready$/m, undefined],
            ['error', '$(error) Tessera', /^Tessera language server: failed$/m, 'error'],
            ['stopped', '$(debug-stop) Tessera', /^Tessera language server: stopped$/m, 'warning'],
        ];
        for (const [state, text, first, background] of cases) {
            const look = logic.statusPresentation({ state });
            assert.equal(look.text, text, state);
            assert.match(look.tooltip, first, state);
            assert.equal(look.background, background, state);
            assert.match(look.tooltip, /Click to show the server log\.$/, state);
        }
    });

    it('names the running server, the command and the reason', () => {
        const ready = logic.statusPresentation({
            state: 'ready',
            command: 'tessera lsp',
            serverInfo: { name: 'tessera-lsp', version: '0.1.0' },
        });
        assert.equal(
            ready.tooltip,
            'Tessera language server: ready (tessera-lsp 0.1.0)\nCommand: tessera lsp\nClick to show the server log.',
        );
        const noVersion = logic.statusPresentation({ state: 'ready', serverInfo: { name: 'tessera-lsp' } });
        assert.match(noVersion.tooltip, /^Tessera language server: ready \(tessera-lsp\)$/m);
        const failed = logic.statusPresentation({
            state: 'error',
            command: 'tessera lsp',
            detail: 'Could not start: tessera-lsp: unexpected argument `--stdio`',
        });
        assert.deepEqual(failed.tooltip.split('\n'), [
            'Tessera language server: failed',
            'Could not start: tessera-lsp: unexpected argument `--stdio`',
            'Command: tessera lsp',
            'Run "Tessera: Restart Server" after fixing the cause (see the log).',
            'Click to show the server log.',
        ]);
        assert.match(logic.statusPresentation({ state: 'stopped' }).tooltip, /"Tessera: Start Server"/);
    });
});

describe('server version', () => {
    it('asks the configured program, with its arguments, for --version', () => {
        assert.deepEqual(logic.versionArgv('tessera', ['lsp']), ['tessera', 'lsp', '--version']);
        assert.deepEqual(logic.versionArgv('/opt/bin/tessera-lsp', []), ['/opt/bin/tessera-lsp', '--version']);
    });

    it('reads NAME VERSION from the first non-blank line', () => {
        assert.deepEqual(logic.parseVersionOutput('tessera-lsp 0.1.0\n'), { name: 'tessera-lsp', version: '0.1.0' });
        assert.deepEqual(logic.parseVersionOutput('\r\n  tessera v0.2.0-dev\r\n'), { name: 'tessera', version: '0.2.0-dev' });
        assert.deepEqual(logic.parseVersionOutput('tessera 1.2.3 (abc1234 2026-11-25)\nmore'), {
            name: 'tessera',
            version: '1.2.3 (abc1234 2026-11-25)',
        });
        assert.deepEqual(logic.parseVersionOutput('tessera-lsp 1.0.0+build.5'), { name: 'tessera-lsp', version: '1.0.0+build.5' });
    });

    it('finds no version in a usage message, an error or nothing', () => {
        for (const out of ['', '\n\n', 'Usage: tessera [COMMAND]', 'error: unexpected argument', 'tessera-lsp', 'tessera-lsp dev']) {
            assert.equal(logic.parseVersionOutput(out), undefined, JSON.stringify(out));
        }
    });

    it('says what the binary printed, and when the running server is older', () => {
        const v = { name: 'tessera-lsp', version: '0.2.0' };
        assert.equal(
            logic.versionMessage('tessera lsp --version', v, '', undefined),
            'tessera-lsp 0.2.0 (`tessera lsp --version`)',
        );
        assert.equal(
            logic.versionMessage('tessera lsp --version', v, '', { name: 'tessera-lsp', version: '0.2.0' }),
            'tessera-lsp 0.2.0 (`tessera lsp --version`)',
        );
        assert.equal(
            logic.versionMessage('tessera lsp --version', v, '', { name: 'tessera-lsp', version: '0.1.0' }),
            'tessera-lsp 0.2.0 (`tessera lsp --version`); the running server is tessera-lsp 0.1.0: restart it to use the new binary.',
        );
        assert.equal(
            logic.versionMessage('x --version', undefined, 'Usage: x\nmore', undefined),
            '`x --version` printed no version: "Usage: x".',
        );
        assert.equal(logic.versionMessage('x --version', undefined, '  \n', undefined), '`x --version` printed no version.');
    });
});

describe('startFailure', () => {
    it("puts the server's last stderr line before the client's error", () => {
        const stderr = 'tessera-lsp: unexpected argument `--stdio`\nUsage: tessera-lsp [--stdio] [--clientProcessId <PID>] (--help for more)\n';
        assert.equal(
            logic.startFailure('Pending response rejected since connection got disposed', stderr),
            'tessera-lsp: unexpected argument `--stdio` (Pending response rejected since connection got disposed)',
        );
    });

    it("is the client's error when the server said nothing new", () => {
        assert.equal(logic.startFailure('spawn tessera ENOENT', ''), 'spawn tessera ENOENT');
        assert.equal(logic.startFailure('spawn tessera ENOENT', '\n  \n'), 'spawn tessera ENOENT');
        assert.equal(logic.startFailure('server said: boom', 'boom'), 'server said: boom');
    });
});
