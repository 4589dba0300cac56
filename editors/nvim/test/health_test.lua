-- :checkhealth tessera, headless (test/run.sh runs it on the Neovim under test, 0.7.2 and later):
--   TESSERA_HEALTH_SERVER=/path/to/tessera-lsp nvim --headless -u test/minimal_init.lua \
--     -c 'luafile test/health_test.lua'
-- $TESSERA_HEALTH_SERVER is the server to start: the real `tessera-lsp` (run.sh passes
-- $TESSERA_LSP, or ${CARGO_TARGET_DIR:-target}/debug/tessera-lsp when it is built), else
-- the stand-in `node editors/test/fake-lsp.js`.
local T = dofile(vim.g.tessera_test_root .. '/test/helpers.lua')
local root = vim.g.tessera_test_root

local function server_cmd()
  local real = vim.env.TESSERA_HEALTH_SERVER
  if real and real ~= '' and vim.fn.executable(real) == 1 then
    return { real }, 'real'
  end
  if vim.fn.executable('node') == 1 then
    return { 'node', root .. '/../test/fake-lsp.js' }, 'fake'
  end
  return nil
end

--- Runs :checkhealth tessera with `opts` for setup() and returns the report's lines.
local function checkhealth(opts)
  require('tessera').setup(vim.tbl_extend('force', { autostart = false }, opts))
  local tabs = #vim.api.nvim_list_tabpages()
  vim.cmd('silent checkhealth tessera')
  local buf = vim.api.nvim_get_current_buf()
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  -- 0.7 opens the report in a new tab; later versions may reuse an empty window.
  if #vim.api.nvim_list_tabpages() > tabs then
    vim.cmd('tabclose')
  end
  pcall(vim.api.nvim_buf_delete, buf, { force = true })
  return lines
end

--- The first report line that contains every one of `needles` (plain text), or nil.
local function line_with(lines, needles)
  for _, line in ipairs(lines) do
    local all = true
    for _, n in ipairs(needles) do
      if not line:find(n, 1, true) then
        all = false
        break
      end
    end
    if all then
      return line
    end
  end
  return nil
end

local function expect(lines, needles)
  local line = line_with(lines, needles)
  T.ok(line ~= nil, 'a line with ' .. vim.inspect(needles) .. ' in:\n' .. table.concat(lines, '\n'))
  return line
end

local function refute(lines, needles)
  local line = line_with(lines, needles)
  T.ok(line == nil, 'unexpected line ' .. tostring(line) .. ' in:\n' .. table.concat(lines, '\n'))
end

local function script(name, body)
  local path = T.tmpdir('health') .. '/' .. name
  T.write(path, { '#!/bin/sh', body })
  vim.fn.setfperm(path, 'rwxr-xr-x')
  return path
end

T.test(':checkhealth tessera: the server is found, has a version and starts', function()
  local cmd, kind = server_cmd()
  if not cmd then
    io.stdout:write('skipped: no tessera-lsp and no node for a stand-in server\n')
    return
  end
  io.stdout:write('note: health check against the ' .. kind .. ' server: ' .. table.concat(cmd, ' ') .. '\n')
  local lines = checkhealth({ cmd = cmd })
  expect(lines, { 'tessera: language server' })
  local found = expect(lines, { 'OK', '`' .. cmd[1] .. '` found: ', vim.fn.exepath(cmd[1]) })
  T.ok(not found:find('ERROR', 1, true), found)
  if kind == 'real' then
    expect(lines, { 'OK', 'version: tessera-lsp ' })
  else
    expect(lines, { 'OK', 'version: v' }) -- `node --version`
  end
  expect(lines, { 'OK', 'the server starts: ', 'answered `initialize` in ' })
  refute(lines, { 'ERROR' })
  expect(lines, { 'tessera: tree-sitter' })
  if vim.fn.has('nvim-0.9') == 0 then
    expect(lines, { 'needs Neovim 0.9+' })
  end
end)

T.test(':checkhealth tessera: the tree-sitter parser and queries (Neovim 0.9+)', function()
  if vim.fn.has('nvim-0.9') == 0 then
    io.stdout:write('skipped: tree-sitter needs Neovim 0.9+\n')
    return
  end
  local lines = checkhealth({ cmd = { 'tessera-no-such-binary' }, parser = '/nonexistent/tessera.so' })
  expect(lines, { 'WARNING', 'no tree-sitter parser for `tessera`' })
  expect(lines, { 'cc -O2 -shared -fPIC' })
  local parser = vim.env.TESSERA_TS_PARSER
  if not parser or parser == '' then
    io.stdout:write('skipped: no compiled tree-sitter-tessera ($TESSERA_TS_PARSER)\n')
    return
  end
  lines = checkhealth({ cmd = { 'tessera-no-such-binary' }, parser = parser })
  expect(lines, { 'OK', 'tree-sitter parser for `tessera`: ' .. parser })
  expect(lines, { 'OK', 'highlight queries: ' })
  expect(lines, { 'OK', 'the highlights query compiles against the parser' })
end)

T.test(':checkhealth tessera: a missing server program is an ERROR with advice', function()
  local lines = checkhealth({ cmd = { 'tessera-no-such-binary', 'lsp' } })
  expect(lines, { 'ERROR', '`tessera-no-such-binary` not found', '`tessera-no-such-binary lsp`' })
  expect(lines, { 'setup({ cmd = ' })
  refute(lines, { 'the server starts' })
end)

T.test(':checkhealth tessera: a server that exits at once is an ERROR with its stderr', function()
  local bad = script('bad-lsp', 'echo "bad-lsp: cannot start" >&2; exit 3')
  local lines = checkhealth({ cmd = { bad } })
  expect(lines, { 'OK', '`' .. bad .. '` found: ' })
  expect(lines, { 'WARNING', '--version` failed (status 3)' })
  expect(lines, { 'ERROR', 'the server does not start', 'exited (status 3)' })
  expect(lines, { 'bad-lsp: cannot start' })
end)

T.test(':checkhealth tessera: a server that never answers times out', function()
  local mute = script('mute-lsp', '[ "$1" = --version ] && { echo mute 1.0; exit 0; }; exec sleep 30')
  vim.g.tessera_health_timeout = 500
  local started = (vim.uv or vim.loop).hrtime()
  local lines = checkhealth({ cmd = { mute } })
  vim.g.tessera_health_timeout = nil
  expect(lines, { 'OK', 'version: mute 1.0' })
  expect(lines, { 'ERROR', 'no answer to `initialize` within 500 ms' })
  T.ok(((vim.uv or vim.loop).hrtime() - started) / 1e6 < 8000, 'the check gives up in time')
end)

T.finish('nvim-health')
