-- Plugin smoke test, no language server needed:
--   nvim --headless -u test/minimal_init.lua -c 'luafile test/smoke.lua'
local T = dofile(vim.g.tessera_test_root .. '/test/helpers.lua')
local root = vim.g.tessera_test_root

T.test('plugin loads and defines its commands', function()
  T.eq(vim.g.loaded_tessera, 1, 'g:loaded_tessera')
  for _, cmd in ipairs({ 'TesseraLower', 'TesseraExplore', 'TesseraRun', 'TesseraRestart' }) do
    T.eq(vim.fn.exists(':' .. cmd), 2, ':' .. cmd)
  end
end)

T.test(':TesseraLower completes the stages', function()
  T.eq(vim.fn.getcompletion('TesseraLower ', 'cmdline'), { 'graph', 'sched', 'tile', 'target', 'all' }, 'all stages')
  T.eq(vim.fn.getcompletion('TesseraLower t', 'cmdline'), { 'tile', 'target' }, 'prefix t')
end)

T.test('setup() without a server installed warns and does not fail', function()
  local messages = {}
  local orig = vim.notify
  vim.notify = function(msg)
    table.insert(messages, msg)
  end
  require('tessera').setup({ cmd = { 'tessera-no-such-binary', 'lsp' } })
  local dir = T.tmpdir('smoke')
  vim.cmd('edit ' .. vim.fn.fnameescape(dir .. '/a.tsr'))
  vim.notify = orig
  T.ok(#messages == 1 and messages[1]:find('not found'), 'one warning: ' .. vim.inspect(messages))
  T.eq(require('tessera').get_client(0), nil, 'no client')
end)

T.test('*.tsr files get filetype tessera and its buffer settings', function()
  local dir = T.tmpdir('ft')
  T.write(dir .. '/gemm.tsr', {
    '@kernel',
    'def k(x: Tensor["n", f32]):',
    '    pass',
  })
  vim.cmd('edit ' .. vim.fn.fnameescape(dir .. '/gemm.tsr'))
  T.eq(vim.bo.filetype, 'tessera', 'filetype')
  T.eq(vim.api.nvim_exec('set ft?', true), '  filetype=tessera', ':set ft?')
  T.eq(vim.bo.commentstring, '# %s', 'commentstring')
  T.eq(vim.bo.shiftwidth, 4, 'shiftwidth')
  T.eq(vim.bo.expandtab, true, 'expandtab')
  T.eq(vim.b.current_syntax, 'tessera', 'syntax')
  T.ok(vim.bo.indentexpr ~= '', 'indentexpr is set: ' .. vim.bo.indentexpr)
end)

T.test('indentation after a line ending in a colon', function()
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, { 'def f(x: f32):' })
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  vim.cmd('normal! ox = 1')
  vim.cmd('normal! oif x:')
  vim.cmd('normal! oy = 2')
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  T.eq(lines, { 'def f(x: f32):', '    x = 1', '    if x:', '        y = 2' }, 'lines')
  vim.cmd('set nomodified')
end)

T.test('syntax groups on a corpus-like file', function()
  local dir = T.tmpdir('syn')
  T.write(dir .. '/s.tsr', {
    '@ts.kernel.autotune(space=dict(BM=[64, 128]))',
    'def gemm(A: Tensor["M", "K", fp8_e4m3 @accum(f32)], n: int = 0x2A):',
    '    x = tile.load(A[0:1_024, 0:16]) * 1e-5  # comment',
    '    """doc"""',
    '@jit @autodiff',
    'y = a @ b + KVCache["B", bf16] @saturate',
  })
  vim.cmd('edit ' .. vim.fn.fnameescape(dir .. '/s.tsr'))
  -- The syntax group at the first character of the `n`-th occurrence of `needle` on `line`.
  local function at(line, needle, n)
    local text = vim.fn.getline(line)
    local col = 0
    for _ = 1, n or 1 do
      col = text:find(needle, col + 1, true)
      assert(col, needle .. ' not on line ' .. line)
    end
    return vim.fn.synIDattr(vim.fn.synID(line, col, 1), 'name')
  end
  T.eq(at(1, '@'), 'tesseraDecorator', '@')
  T.eq(at(1, 'ts.kernel'), 'tesseraDecoratorName', 'ts.kernel.autotune')
  T.eq(at(2, 'def'), 'tesseraDefine', 'def')
  T.eq(at(2, 'gemm'), 'tesseraFunction', 'gemm')
  T.eq(at(2, 'Tensor'), 'tesseraType', 'Tensor')
  T.eq(at(2, '"K"'), 'tesseraString', '"K"')
  T.eq(at(2, 'fp8_e4m3'), 'tesseraDtype', 'fp8_e4m3')
  T.eq(at(2, '@accum'), 'tesseraAnyPolicy', '@accum')
  T.eq(at(2, 'f32'), 'tesseraDtype', 'f32 in a policy')
  T.eq(at(2, 'int'), 'tesseraScalarType', 'int')
  T.eq(at(2, '0x2A'), 'tesseraNumber', '0x2A')
  T.eq(at(3, 'tile'), 'tesseraNamespace', 'tile')
  T.eq(at(3, 'load'), 'tesseraIntrinsic', 'load')
  T.eq(at(3, '1_024'), 'tesseraNumber', '1_024')
  T.eq(at(3, '1e-5'), 'tesseraFloat', '1e-5')
  T.eq(at(3, '# comment'), 'tesseraComment', 'comment')
  T.eq(at(4, 'doc'), 'tesseraString', 'docstring')
  T.eq(at(5, 'autodiff'), 'tesseraDecoratorName', 'second decorator on a line')
  T.eq(at(6, '@saturate'), 'tesseraPolicy', 'known policy outside a type')
  T.eq(at(6, '@'), '', 'matmul')
end)

T.test('kernel_at picks the kernel under the cursor', function()
  local t = require('tessera')
  local function k(name, l1, l2)
    return { name = name, kind = 'kernel', range = { start = { line = l1, character = 0 }, ['end'] = { line = l2, character = 5 } } }
  end
  local ks = { k('b', 20, 30), k('a', 2, 10), k('inner', 5, 6) }
  T.eq(t.kernel_at(ks, { line = 3, character = 0 }).name, 'a', 'in a')
  T.eq(t.kernel_at(ks, { line = 5, character = 2 }).name, 'inner', 'innermost')
  T.eq(t.kernel_at(ks, { line = 30, character = 5 }).name, 'b', 'end inclusive')
  T.eq(t.kernel_at(ks, { line = 15, character = 0 }), nil, 'between')
  T.eq(t.kernel_at({}, { line = 0, character = 0 }), nil, 'empty')
  local headers = { k('x', 3, 3), k('y', 9, 9) }
  T.eq(t.kernel_at(headers, { line = 7, character = 0 }).name, 'x', 'header-only ranges')
  T.eq(t.kernel_at(headers, { line = 1, character = 0 }), nil, 'before the first header')
end)

T.test('scan_kernels finds decorated kernels and graph functions', function()
  local ks = require('tessera').scan_kernels({
    'import tessera as ts',
    '@ts.kernel.autotune(',
    '    space=dict(BM=[64, 128]),',
    '    metric="latency_ms")',
    'def gemm(A: Tensor["M", "K", bf16],',
    '         B: Tensor["K", "N", bf16]):',
    '    x = 1',
    '',
    'def helper(x):',
    '    return x',
    '@jit @autodiff',
    'def loss(x: Tensor[f32]) -> Tensor[f32]:',
    '    return x',
    '@kernel.schedule(block(64, 64))',
    'def k2(a: f32):',
    '    pass',
  })
  local got = {}
  for _, k in ipairs(ks) do
    table.insert(got, { k.name, k.kind, k.range.start.line, k.range['end'].line })
  end
  T.eq(got, { { 'gemm', 'kernel.autotune', 1, 6 }, { 'loss', 'jit', 10, 12 }, { 'k2', 'kernel.schedule', 13, 15 } }, 'kernels')
end)

T.test('argv for the explorer and the runner (no shell involved)', function()
  local t = require('tessera')
  T.eq(t.explore_argv({ 'tessera-explore' }, "/w/it's here/a b.tsr", 'gemm'),
    { 'tessera-explore', "/w/it's here/a b.tsr", '--kernel', 'gemm' }, 'explore')
  T.eq(t.explore_argv('tessera', 'a.tsr', 'k'), { 'tessera', 'explore', 'a.tsr', '--kernel', 'k' }, 'tessera explore')
  T.eq(t.run_argv({ 'tessera', 'run' }, 'a.tsr', 'k', { '--dims', 'M=64' }),
    { 'tessera', 'run', 'a.tsr', '--kernel', 'k', '--dims', 'M=64' }, 'run')
end)

T.test('root_dir: nearest tessera.toml or .git, else the file directory', function()
  local t = require('tessera')
  local base = T.tmpdir('roots')
  T.write(base .. '/proj/tessera.toml', { 'target = "sm_90"' })
  T.write(base .. '/proj/src/deep/a.tsr', { '' })
  vim.fn.mkdir(base .. '/repo/.git', 'p')
  T.write(base .. '/repo/k/b.tsr', { '' })
  T.write(base .. '/loose/c.tsr', { '' })
  T.eq(t.root_dir(base .. '/proj/src/deep/a.tsr'), base .. '/proj', 'tessera.toml')
  T.eq(t.root_dir(base .. '/repo/k/b.tsr'), base .. '/repo', '.git')
  -- (no marker up to /tmp in a clean test machine)
  local loose = t.root_dir(base .. '/loose/c.tsr')
  T.ok(loose == base .. '/loose' or vim.loop.fs_stat(loose .. '/.git') or vim.loop.fs_stat(loose .. '/tessera.toml'), 'loose: ' .. loose)
end)

T.test('UTF-16 columns round-trip', function()
  local t = require('tessera')
  local line = 'x = "é😀" + y'
  local c16 = t._char_index(line, #'x = "é😀" + ', 'utf-16')
  T.eq(c16, 12, 'utf-16 index (é is 1 unit, 😀 is 2)')
  T.eq(t._byte_index(line, c16, 'utf-16'), #'x = "é😀" + ', 'byte index')
  T.eq(t._char_index(line, 5, 'utf-8'), 5, 'utf-8')
end)

T.test('tree-sitter is skipped cleanly without a parser', function()
  T.eq(require('tessera').setup_treesitter(), false, 'no tessera parser here')
  T.ok(vim.fn.isdirectory(vim.fn.fnamemodify(require('tessera').default_queries_dir(), ':h')) == 1
    or true, 'queries dir resolves: ' .. require('tessera').default_queries_dir())
  T.eq(require('tessera').default_queries_dir(), vim.fn.fnamemodify(root .. '/../../grammars/tree-sitter-tessera/queries', ':p'):gsub('/$', ''), 'queries dir')
end)

T.finish('smoke')
