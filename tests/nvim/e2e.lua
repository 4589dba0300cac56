-- End-to-end: the Neovim plugin of editors/nvim against the REAL language server.
--   TESSERA_LSP=/path/to/tessera-lsp nvim --headless -u editors/nvim/test/minimal_init.lua \
--     -c 'luafile tests/nvim/e2e.lua'
-- (tests/nvim/run.sh does this.) Opens a copy of examples/gemm.tsr with an injected shape
-- error, waits for the server's E0301 diagnostic, reads a hover, fixes the error and waits
-- for the diagnostics to clear, runs the code lenses and formatting requests.
local T = dofile(vim.g.tessera_test_root .. '/test/helpers.lua')
local api = vim.api

local server = vim.env.TESSERA_LSP
local repo = vim.fn.fnamemodify(vim.g.tessera_test_root .. '/../..', ':p')
local dir = T.tmpdir('proj')
T.write(dir .. '/tessera.toml', { 'target = "sm_90"' })
local lines = vim.fn.readfile(repo .. 'examples/gemm.tsr')
local broken = {}
for _, l in ipairs(lines) do
  -- b_s as a BN x BN buffer: the MMA's inner dims (BK vs BN) differ.
  table.insert(broken, (l:gsub('b_s = tile.alloc_shared%(%(ctx.BK, ctx.BN%)', 'b_s = tile.alloc_shared((ctx.BN, ctx.BN)')))
end
-- The example is formatted; one blank line fewer above the kernel gives the formatting
-- test below something to fix.
for i, l in ipairs(broken) do
  if l:find('^@ts.kernel') and broken[i - 1] == '' and broken[i - 2] == '' then
    table.remove(broken, i - 1)
    break
  end
end
local file = dir .. '/gemm.tsr'
T.write(file, broken)

require('tessera').setup({ cmd = { server }, codelens = true })

local function code_of(d)
  return d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code)
end

-- Target lints (register/shared-memory/occupancy estimates, autotune pruning) depend on
-- the target analyses; the checks here are about the others.
local target_lints = {
  E0500 = true, E0501 = true, E0703 = true, W0600 = true, W0601 = true,
  W0602 = true, W0603 = true, W0604 = true, W0702 = true,
}

local function diags(bufnr)
  return vim.tbl_filter(function(d)
    return not target_lints[code_of(d)]
  end, vim.diagnostic.get(bufnr))
end

local function request(bufnr, method, params)
  local results = vim.lsp.buf_request_sync(bufnr, method, params, 20000)
  T.ok(results ~= nil, method .. ' answered')
  for _, r in pairs(results) do
    T.ok(r.err == nil, method .. ': ' .. vim.inspect(r.err))
    return r.result
  end
end

local bufnr
T.test('the real server starts and reports the shape error', function()
  vim.cmd('edit ' .. vim.fn.fnameescape(file))
  bufnr = api.nvim_get_current_buf()
  T.eq(vim.bo[bufnr].filetype, 'tessera', 'filetype')
  T.wait(20000, function()
    return require('tessera').get_client(bufnr) ~= nil
  end, 'the tessera client')
  T.wait(20000, function()
    for _, d in ipairs(diags(bufnr)) do
      if code_of(d) == 'E0301' then
        return true
      end
    end
    return false
  end, 'an E0301 diagnostic')
  -- Two E0301: the cp_async into the BN x BN buffer, and the MMA (BK vs BN).
  local on_mma = vim.tbl_filter(function(x)
    local line = api.nvim_buf_get_lines(bufnr, x.lnum, x.lnum + 1, false)[1]
    return code_of(x) == 'E0301' and line:find('tile.mma', 1, true) ~= nil
  end, diags(bufnr))
  T.eq(#on_mma, 1, 'an E0301 on the tile.mma line: ' .. vim.inspect(diags(bufnr)))
  local d = on_mma[1]
  T.eq(d.severity, vim.diagnostic.severity.ERROR, 'severity')
  T.ok(d.message:find('BK', 1, true) and d.message:find('BN', 1, true), d.message)
end)

T.test('hover shows the tile type', function()
  local row
  for i, l in ipairs(api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    if l:find('acc = tile.zeros', 1, true) then
      row = i - 1
    end
  end
  local col = api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1]:find('acc', 1, true) - 1
  local result = request(bufnr, 'textDocument/hover', {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = row, character = col },
  })
  T.ok(result and result.contents, 'a hover')
  T.ok(result.contents.value:find('acc: tile<BMxBNxf32>', 1, true), result.contents.value)
end)

T.test('fixing the error clears the diagnostics', function()
  for i, l in ipairs(api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    local s = l:find('(ctx.BN, ctx.BN)', 1, true)
    if s then
      -- An incremental edit: BN -> BK in the first dim.
      api.nvim_buf_set_text(bufnr, i - 1, s + 4, i - 1, s + 6, { 'BK' })
    end
  end
  T.wait(20000, function()
    return #diags(bufnr) == 0
  end, 'no diagnostics')
end)

T.test('code lenses and kernels come from the server', function()
  local lenses = request(bufnr, 'textDocument/codeLens', { textDocument = { uri = vim.uri_from_bufnr(bufnr) } })
  T.eq(#lenses, 2, 'two lenses')
  T.eq(lenses[1].command.command, 'tessera.explore', 'explore lens')
  T.eq(lenses[1].command.arguments[2], 'gemm', 'kernel argument')
  local done, kernels = false, nil
  require('tessera').kernels(bufnr, function(err, ks)
    T.ok(err == nil, vim.inspect(err))
    kernels, done = ks, true
  end)
  T.wait(20000, function()
    return done
  end, 'tessera/kernels')
  T.eq(#kernels, 1, 'one kernel')
  T.eq(kernels[1].name, 'gemm', 'kernel name')
  T.eq(kernels[1].kind, 'kernel', 'kernel kind')
end)

T.test('formatting through the server', function()
  local edits = request(bufnr, 'textDocument/formatting', {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    options = { tabSize = 4, insertSpaces = true },
  })
  T.eq(#edits, 1, 'one whole-document edit')
  T.ok(edits[1].newText:find('\n\n\n@ts.kernel.autotune', 1, true), 'two blank lines before the kernel')
end)

T.finish('nvim-e2e')
