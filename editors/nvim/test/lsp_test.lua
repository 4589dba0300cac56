-- End-to-end test of the client against editors/test/fake-lsp.js (a stand-in for
-- `tessera lsp` that implements the editor protocol):
--   nvim --headless -u test/minimal_init.lua -c 'luafile test/lsp_test.lua'
-- Needs `node`. Exercises: one client per root, tessera/kernels + tessera/lowering, the IR
-- preview (split, filetype, source highlighting, refresh on save), errors, the code-lens
-- command handlers (argv passed to the terminal without a shell), :TesseraRestart.
local T = dofile(vim.g.tessera_test_root .. '/test/helpers.lua')
local root = vim.g.tessera_test_root
local api = vim.api

local fake = vim.fn.fnamemodify(root .. '/../test/fake-lsp.js', ':p')
local base = T.tmpdir([[it's a "dir"]])
local log = base .. '/lsp.log'
local args_out = base .. '/args.txt'
vim.env.FAKE_LSP_LOG = log
vim.env.ARGS_OUT = args_out

-- Stand-in for tessera-explore / tessera run: writes its arguments, one a line.
local script = base .. '/record-args.sh'
T.write(script, { '#!/bin/sh', 'for a in "$@"; do printf "%s\\n" "$a"; done > "$ARGS_OUT"' })

local proj = base .. '/proj'
T.write(proj .. '/tessera.toml', { 'target = "sm_90"' })
local gemm_lines = {
  '# GEMM',
  'from tessera import *',
  '',
  '@kernel.autotune(',
  '    space=dict(BM=[64, 128]))',
  'def gemm(A: Tensor["M", "K", bf16], C: Tensor["M", "K", f32]):',
  '    ctx = tile.context()',
  '    acc = tile.zeros((ctx.BM, ctx.BN), f32)',
  '    C[0:1, 0:1] = acc',
  '',
  'BLOCK = 128',
  '',
  '@jit',
  'def graph_fn(x: Tensor["n", f32]) -> Tensor["n", f32]:',
  '    return x + 1.0',
}
T.write(proj .. '/gemm kernels.tsr', gemm_lines)
T.write(proj .. '/other.tsr', { '@kernel', 'def k(x: Tensor["n", f32]):', '    pass' })
T.write(base .. '/elsewhere/tessera.toml', { '' })
T.write(base .. '/elsewhere/third.tsr', { '@kernel', 'def k3(x: Tensor["n", f32]):', '    pass' })

local function read_log()
  local msgs = {}
  if vim.fn.filereadable(log) == 1 then
    for _, line in ipairs(vim.fn.readfile(log)) do
      table.insert(msgs, vim.json and vim.json.decode(line) or vim.fn.json_decode(line))
    end
  end
  return msgs
end

local function requests(method)
  return vim.tbl_filter(function(m)
    return m.method == method
  end, read_log())
end

local t = require('tessera')
t.setup({
  cmd = { 'node', fake },
  explore_cmd = { '/bin/sh', script },
  run_cmd = { '/bin/sh', script, 'run' },
  run_args = { '--dims', 'M=64,K=64' },
})

local gemm_file = proj .. '/gemm kernels.tsr'
local src_buf

T.test('the server starts on a tessera buffer', function()
  vim.cmd('edit ' .. vim.fn.fnameescape(gemm_file))
  src_buf = api.nvim_get_current_buf()
  T.eq(vim.bo.filetype, 'tessera', 'filetype')
  T.wait(10000, function()
    local c = t.get_client(src_buf)
    return c and c.initialized ~= false and #requests('textDocument/didOpen') > 0
  end, 'client attached and didOpen sent')
  T.eq(t.get_client(src_buf).config.root_dir, proj, 'root is the tessera.toml directory')
end)

T.test('one client per root directory', function()
  local id = t.get_client(src_buf).id
  vim.cmd('edit ' .. vim.fn.fnameescape(proj .. '/other.tsr'))
  T.wait(5000, function()
    return t.get_client(0) ~= nil
  end, 'attach other.tsr')
  T.eq(t.get_client(0).id, id, 'same client for the same root')
  vim.cmd('edit ' .. vim.fn.fnameescape(base .. '/elsewhere/third.tsr'))
  T.wait(10000, function()
    return t.get_client(0) ~= nil
  end, 'attach third.tsr')
  T.ok(t.get_client(0).id ~= id, 'another client for another root')
  vim.cmd('buffer ' .. src_buf)
end)

T.test('tessera/kernels lists the kernels', function()
  local got
  t.kernels(src_buf, function(err, ks, from_server)
    got = { err = err, ks = ks, from_server = from_server }
  end)
  T.wait(5000, function()
    return got ~= nil
  end, 'kernels')
  T.eq(got.err, nil, 'no error')
  T.eq(got.from_server, true, 'from the server')
  T.eq(vim.tbl_map(function(k)
    return k.name .. ':' .. k.kind
  end, got.ks), { 'gemm:kernel.autotune', 'graph_fn:jit' }, 'kernels')
end)

local ir_buf

T.test('lower() shows the kernel under the cursor in a vertical split', function()
  api.nvim_win_set_cursor(0, { 8, 10 }) -- inside gemm's body
  local done
  t.lower('tile', function(err, result, irbuf)
    done = { err = err, result = result, irbuf = irbuf }
  end)
  T.wait(5000, function()
    return done ~= nil
  end, 'lowering')
  T.eq(done.err, nil, 'no error')
  ir_buf = done.irbuf
  T.eq(done.result.kernel, 'gemm', 'kernel')
  local req = requests('tessera/lowering')[1]
  T.eq(req.params.kernel, 'gemm', 'request kernel')
  T.eq(req.params.stage, 'tile', 'request stage')
  T.eq(req.params.target, 'sm_90', 'request target')
  T.eq(req.params.uri, vim.uri_from_fname(gemm_file), 'request uri')
  T.eq(vim.bo[ir_buf].filetype, 'tessera-ir', 'IR filetype')
  T.eq(vim.bo[ir_buf].modifiable, false, 'read-only')
  T.eq(vim.bo[ir_buf].buftype, 'nofile', 'scratch')
  local lines = api.nvim_buf_get_lines(ir_buf, 0, -1, false)
  T.eq(lines[1], '// tile IR of gemm for sm_90', 'header')
  T.eq(lines[2], 'func @gemm {', 'func line')
  T.eq(#lines, 6, 'three ops + header + braces')
  T.eq(api.nvim_get_current_buf(), src_buf, 'the cursor stays in the source')
  T.eq(vim.fn.winlayout()[1], 'row', 'side by side')
  T.ok(vim.fn.bufwinid(ir_buf) ~= -1, 'IR visible')
end)

T.test('moving in the IR highlights the source it came from', function()
  local win = vim.fn.bufwinid(ir_buf)
  api.nvim_set_current_win(win)
  api.nvim_win_set_cursor(win, { 4, 0 }) -- "%1 = ... acc = tile.zeros" (source line 8)
  vim.cmd('doautocmd CursorMoved')
  local ns = api.nvim_create_namespace('tessera_ir_source')
  local marks = api.nvim_buf_get_extmarks(src_buf, ns, 0, -1, {})
  T.eq(#marks, 1, 'one highlighted range')
  T.eq(marks[1][2], 7, 'on source line 8')
  -- <CR> jumps there.
  vim.cmd('execute "normal \\<CR>"')
  T.eq(api.nvim_get_current_buf(), src_buf, 'jumped to the source')
  T.eq(api.nvim_win_get_cursor(0), { 8, 4 }, 'at the op')
end)

T.test('saving the source re-lowers the open preview', function()
  api.nvim_buf_set_lines(src_buf, 8, 8, false, { '    acc = acc * 2.0' })
  vim.cmd('silent write')
  T.wait(5000, function()
    local lines = api.nvim_buf_get_lines(ir_buf, 0, -1, false)
    return #lines == 7
  end, 'preview refreshed')
  local text = table.concat(api.nvim_buf_get_lines(ir_buf, 0, -1, false), '\n')
  T.ok(text:find('acc = acc * 2.0', 1, true), 'new op in the preview: ' .. text)
  T.eq(#vim.api.nvim_list_wins(), 2, 'no new window')
end)

T.test('lowering errors come back to the callback', function()
  local got
  t.lower('graph', function(err)
    got = err
  end, { kernel = 'nope' })
  T.wait(5000, function()
    return got ~= nil
  end, 'error')
  T.ok(got:find('unknown kernel: nope', 1, true), got)
  got = nil
  t.lower('bogus', function(err)
    got = err
  end)
  T.ok(got and got:find('unknown stage', 1, true), tostring(got))
end)

T.test('outside every kernel, the kernel is picked with vim.ui.select', function()
  api.nvim_win_set_cursor(0, { 11, 0 }) -- BLOCK = 128
  local orig = vim.ui.select
  local offered
  vim.ui.select = function(items, _, on_choice)
    offered = vim.tbl_map(function(k)
      return k.name
    end, items)
    on_choice(items[2])
  end
  local done
  t.lower('graph', function(err, result)
    done = { err = err, result = result }
  end)
  T.wait(5000, function()
    return done ~= nil
  end, 'lowering')
  vim.ui.select = orig
  T.eq(offered, { 'gemm', 'graph_fn' }, 'choices')
  T.eq(done.err, nil, 'no error')
  T.eq(done.result.kernel, 'graph_fn', 'the chosen kernel')
end)

T.test(':TesseraLower {stage} opens another preview', function()
  api.nvim_win_set_cursor(0, { 7, 4 })
  local before = #api.nvim_list_wins()
  vim.cmd('TesseraLower sched')
  T.wait(5000, function()
    return #api.nvim_list_wins() == before + 1
  end, 'new preview window')
  local names = vim.tbl_map(function(w)
    return api.nvim_buf_get_name(api.nvim_win_get_buf(w))
  end, api.nvim_list_wins())
  T.ok(vim.tbl_contains(names, 'tessera-ir://gemm kernels.tsr/gemm.sched.sm_90'), vim.inspect(names))
end)

local function wait_args()
  T.wait(5000, function()
    return vim.fn.filereadable(args_out) == 1 and #vim.fn.readfile(args_out) > 0
  end, 'the terminal command')
  local got = vim.fn.readfile(args_out)
  vim.fn.delete(args_out)
  return got
end

T.test('code lenses arrive and ▶ Explore runs the explorer in a terminal', function()
  vim.cmd('only')
  vim.cmd('buffer ' .. src_buf)
  vim.lsp.codelens.refresh()
  T.wait(5000, function()
    return #vim.lsp.codelens.get(src_buf) > 0
  end, 'code lenses')
  local titles = vim.tbl_map(function(l)
    return l.command.title .. ' ' .. l.command.command
  end, vim.lsp.codelens.get(src_buf))
  T.ok(vim.tbl_contains(titles, '▶ Explore tessera.explore'), vim.inspect(titles))
  api.nvim_win_set_cursor(0, { 6, 0 }) -- the lens line (gemm's name)
  local orig = vim.ui.select
  vim.ui.select = function(items, _, on_choice)
    for _, item in ipairs(items) do
      local lens = item.lens or item
      if lens.command and lens.command.command == 'tessera.explore' then
        return on_choice(item)
      end
    end
    on_choice(items[1])
  end
  vim.lsp.codelens.run()
  vim.ui.select = orig
  T.eq(wait_args(), { gemm_file, '--kernel', 'gemm' }, 'explorer argv')
  T.eq(vim.bo.buftype, 'terminal', 'in a terminal split')
  vim.cmd('stopinsert')
end)

T.test('⚡ Run handler runs `tessera run FILE --kernel NAME [run_args]`', function()
  local client = t.get_client(src_buf)
  client.commands['tessera.run']({ title = '⚡ Run', command = 'tessera.run', arguments = { vim.uri_from_fname(gemm_file), 'graph_fn' } }, { bufnr = src_buf, client_id = client.id })
  T.eq(wait_args(), { 'run', gemm_file, '--kernel', 'graph_fn', '--dims', 'M=64,K=64' }, 'runner argv')
  vim.cmd('stopinsert')
end)

T.test(':TesseraExplore uses the kernel under the cursor', function()
  vim.cmd('only')
  vim.cmd('buffer ' .. src_buf)
  api.nvim_win_set_cursor(0, { 15, 4 })
  vim.cmd('TesseraExplore')
  T.eq(wait_args(), { gemm_file, '--kernel', 'graph_fn' }, 'explorer argv')
  vim.cmd('stopinsert')
end)

T.test(':TesseraRestart starts a new client', function()
  vim.cmd('only')
  vim.cmd('buffer ' .. src_buf)
  local old = t.get_client(src_buf).id
  vim.cmd('TesseraRestart')
  T.wait(10000, function()
    local c = t.get_client(src_buf)
    return c ~= nil and c.id ~= old
  end, 'new client')
end)

T.finish('nvim-lsp')
