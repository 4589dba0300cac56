-- :checkhealth tessera
--
-- Reports: the language server program (found on $PATH, its --version), whether it starts
-- and answers `initialize`, the explorer, and the tree-sitter parser and queries.
-- Works on Neovim 0.7 (require('health').report_*), 0.8/0.9 (vim.health.report_*) and 0.10+
-- (vim.health.start/ok/...): the API is picked at run time.
local M = {}

local uv = vim.uv or vim.loop

-- ---------------------------------------------------------------------------------------------
-- The report API of this Neovim

local function reporter()
  local h = vim.health
  if h and h.start then
    return { start = h.start, ok = h.ok, info = h.info, warn = h.warn, error = h.error }
  end
  if not (h and h.report_start) then
    h = require('health')
  end
  return {
    start = h.report_start,
    ok = h.report_ok,
    info = h.report_info,
    warn = h.report_warn,
    error = h.report_error,
  }
end

local function has(feature)
  return vim.fn.has(feature) == 1
end

local function json_encode(v)
  return vim.json and vim.json.encode(v) or vim.fn.json_encode(v)
end

local function json_decode(s)
  if vim.json then
    return pcall(vim.json.decode, s)
  end
  return pcall(vim.fn.json_decode, s)
end

local function as_list(v)
  if type(v) == 'string' then
    return { v }
  end
  return vim.deepcopy(v or {})
end

local function first_line(s)
  return (s or ''):gsub('\r', ''):match('^%s*([^\n]*)') or ''
end

-- ---------------------------------------------------------------------------------------------
-- Running programs, with a time limit (a hung program must not hang :checkhealth)

--- Runs argv to completion or `timeout_ms`; returns { code, stdout, stderr, timed_out }.
function M.run(argv, timeout_ms)
  local out, err = {}, {}
  local ok, job = pcall(vim.fn.jobstart, argv, {
    stdout_buffered = true,
    stderr_buffered = true,
    on_stdout = function(_, data)
      out = data
    end,
    on_stderr = function(_, data)
      err = data
    end,
  })
  if not ok or job <= 0 then
    return { code = -1, stdout = '', stderr = tostring(job), timed_out = false }
  end
  local status = vim.fn.jobwait({ job }, timeout_ms)[1]
  if status == -1 then
    vim.fn.jobstop(job)
    return { code = -1, stdout = table.concat(out, '\n'), stderr = table.concat(err, '\n'), timed_out = true }
  end
  -- The buffered callbacks run right after the exit.
  vim.wait(200, function()
    return #out > 0 or #err > 0
  end, 10)
  return { code = status, stdout = table.concat(out, '\n'), stderr = table.concat(err, '\n'), timed_out = false }
end

--- Starts `cmd` as a language server, sends `initialize` and waits for the answer (at most
--- `timeout_ms`), then asks it to shut down. Returns { ok, ms, result, error, stderr, code }.
function M.initialize(cmd, root, timeout_ms)
  local stdin, stdout, stderr = uv.new_pipe(false), uv.new_pipe(false), uv.new_pipe(false)
  local res = { ok = false, stderr = '' }
  local exited = false
  local handle, pid_or_err
  handle, pid_or_err = uv.spawn(cmd[1], {
    args = vim.list_slice(cmd, 2),
    stdio = { stdin, stdout, stderr },
    cwd = root,
  }, function(code, signal)
    exited = true
    res.code = code
    res.signal = signal
  end)
  if not handle then
    for _, p in ipairs({ stdin, stdout, stderr }) do
      p:close()
    end
    res.error = 'could not start it: ' .. tostring(pid_or_err)
    return res
  end

  local buffer = ''
  local function on_message(msg)
    if msg.id == 1 then
      res.answered = true
      if msg.error then
        res.error = string.format('`initialize` failed: %s', msg.error.message or vim.inspect(msg.error))
      else
        res.ok = true
        res.result = msg.result
      end
    end
  end
  stdout:read_start(function(read_err, data)
    if read_err or not data then
      return
    end
    buffer = buffer .. data
    while true do
      local header_end = buffer:find('\r\n\r\n', 1, true)
      if not header_end then
        return
      end
      local length = tonumber(buffer:sub(1, header_end):match('[Cc]ontent%-[Ll]ength:%s*(%d+)'))
      if not length then
        buffer = ''
        return
      end
      if #buffer < header_end + 3 + length then
        return
      end
      local body = buffer:sub(header_end + 4, header_end + 3 + length)
      buffer = buffer:sub(header_end + 4 + length)
      local ok, msg = json_decode(body)
      if ok and type(msg) == 'table' then
        vim.schedule(function()
          on_message(msg)
        end)
      end
    end
  end)
  stderr:read_start(function(_, data)
    if data and #res.stderr < 4000 then
      res.stderr = res.stderr .. data
    end
  end)

  local function send(msg)
    msg.jsonrpc = '2.0'
    local body = json_encode(msg)
    stdin:write(string.format('Content-Length: %d\r\n\r\n%s', #body, body))
  end
  local started = uv.hrtime()
  send({
    id = 1,
    method = 'initialize',
    params = {
      processId = vim.fn.getpid(),
      clientInfo = { name = 'Neovim :checkhealth tessera' },
      rootUri = vim.uri_from_fname(root),
      capabilities = vim.empty_dict(),
    },
  })
  vim.wait(timeout_ms, function()
    return res.answered or exited
  end, 20)
  res.ms = math.floor((uv.hrtime() - started) / 1e6)
  if not res.answered and not res.error then
    if exited then
      res.error = string.format('it exited (status %s) without answering `initialize`', tostring(res.code))
    else
      res.error = string.format('no answer to `initialize` within %d ms', timeout_ms)
    end
  end

  if not exited then
    pcall(send, { id = 2, method = 'shutdown' })
    vim.wait(1000, function()
      return exited
    end, 20)
    if not exited then
      pcall(send, { method = 'exit' })
      vim.wait(1000, function()
        return exited
      end, 20)
    end
    if not exited then
      pcall(uv.process_kill, handle, 'sigterm')
    end
  end
  for _, p in ipairs({ stdin, stdout, stderr }) do
    if not p:is_closing() then
      p:close()
    end
  end
  if not handle:is_closing() then
    handle:close()
  end
  return res
end

-- ---------------------------------------------------------------------------------------------
-- The checks

local function config()
  local ok, tessera = pcall(require, 'tessera')
  if ok then
    return tessera, tessera.config
  end
  return nil, { cmd = { 'tessera', 'lsp' }, explore_cmd = { 'tessera-explore' }, treesitter = true }
end

local function check_server(r, cfg)
  r.start('tessera: language server')
  local cmd = as_list(cfg.cmd)
  if #cmd == 0 then
    r.error('`cmd` is empty', { 'require("tessera").setup({ cmd = { "tessera", "lsp" } })' })
    return
  end
  local argv = table.concat(cmd, ' ')
  local path = vim.fn.exepath(cmd[1])
  if path == '' then
    r.error(string.format('`%s` not found (the server command is `%s`)', cmd[1], argv), {
      'Install it: `cargo install --path .` in the Tessera repository (tessera, tessera-lsp, tessera-explore), or put a built one on $PATH',
      'or point the plugin at it: require("tessera").setup({ cmd = { "/path/to/tessera-lsp" } })',
    })
    return
  end
  r.ok(string.format('`%s` found: %s', cmd[1], path))

  local version = M.run({ path, '--version' }, 5000)
  if version.timed_out then
    r.warn(string.format('`%s --version` did not finish within 5 s', cmd[1]))
  elseif version.code ~= 0 then
    r.warn(string.format('`%s --version` failed (status %d): %s', cmd[1], version.code, first_line(version.stderr)))
  else
    r.ok('version: ' .. first_line(version.stdout))
  end

  local root = vim.fn.getcwd()
  local init = M.initialize(vim.list_extend({ path }, vim.list_slice(cmd, 2)), root, tonumber(vim.g.tessera_health_timeout) or 10000)
  if init.ok then
    local info = (init.result or {}).serverInfo or {}
    local name = info.name and (' (' .. info.name .. (info.version and (' ' .. info.version) or '') .. ')') or ''
    r.ok(string.format('the server starts: `%s` answered `initialize` in %d ms%s', argv, init.ms, name))
  else
    local advice = { 'Run it by hand: `' .. argv .. '`; it should wait for LSP messages on stdin' }
    local err = first_line(init.stderr)
    if err ~= '' then
      table.insert(advice, 1, 'its stderr: ' .. err)
    end
    r.error(string.format('the server does not start (`%s`): %s', argv, init.error or '?'), advice)
  end

  local clients
  if vim.lsp.get_clients then
    clients = vim.lsp.get_clients({ name = 'tessera' })
  else
    clients = vim.tbl_filter(function(c)
      return c.name == 'tessera'
    end, vim.lsp.get_active_clients())
  end
  if #clients > 0 then
    for _, c in ipairs(clients) do
      r.info(string.format('running client %d, root %s', c.id, tostring(c.config and c.config.root_dir)))
    end
  else
    r.info('no tessera client is running (one starts when a .tsr file is opened)')
  end
end

local function check_explorer(r, cfg)
  r.start('tessera: explorer')
  local cmd = as_list(cfg.explore_cmd)
  local path = cmd[1] and vim.fn.exepath(cmd[1]) or ''
  if path == '' then
    r.warn(string.format('`%s` not found: :TesseraExplore will not work', tostring(cmd[1])), {
      'Install it with the CLI (`cargo install --path .` in the Tessera repository), or use `tessera explore`: require("tessera").setup({ explore_cmd = { "tessera" } })',
    })
  else
    r.ok(string.format('`%s` found: %s', cmd[1], path))
  end
end

local function check_treesitter(r, tessera, cfg)
  r.start('tessera: tree-sitter')
  local build = 'Build the parser: cd grammars/tree-sitter-tessera/src && '
    .. 'cc -O2 -shared -fPIC -I. parser.c scanner.c -o ~/.local/share/nvim/site/parser/tessera.so'
  if not has('nvim-0.9') then
    r.info('tree-sitter highlighting needs Neovim 0.9+; this one uses the syntax file (syntax/tessera.vim)')
    return
  end
  if not cfg.treesitter then
    r.info('tree-sitter is switched off (`treesitter = false`): the syntax file is used')
    return
  end
  local popts = cfg.parser
  if type(popts) == 'string' then
    popts = { path = popts }
  end
  local ok, res = pcall(vim.treesitter.language.add, 'tessera', popts)
  if not ok or res == false or not pcall(vim.treesitter.language.inspect, 'tessera') then
    r.warn('no tree-sitter parser for `tessera`: highlighting uses the syntax file', {
      build,
      'or name a compiled parser: require("tessera").setup({ parser = "/path/to/tessera.so" })',
    })
    return
  end
  local where = popts and popts.path or (vim.api.nvim_get_runtime_file('parser/tessera.*', false)[1] or 'loaded')
  r.ok('tree-sitter parser for `tessera`: ' .. where)

  local installed = vim.treesitter.query.get_files and vim.treesitter.query.get_files('tessera', 'highlights') or {}
  local dir = cfg.queries_dir or (tessera and tessera.default_queries_dir()) or ''
  if #installed > 0 then
    r.ok('highlight queries from the runtimepath: ' .. installed[1])
  elseif vim.fn.filereadable(dir .. '/highlights.scm') == 1 then
    r.ok('highlight queries: ' .. dir)
  else
    r.warn('no highlights.scm for `tessera` (looked in the runtimepath and ' .. dir .. ')', {
      'Set `queries_dir` to the repository\'s grammars/tree-sitter-tessera/queries',
    })
    return
  end
  if tessera and tessera.setup_treesitter then
    pcall(tessera.setup_treesitter)
  end
  local get = vim.treesitter.query.get or vim.treesitter.query.get_query
  local qok, qerr = pcall(get, 'tessera', 'highlights')
  if qok and qerr then
    r.ok('the highlights query compiles against the parser')
  else
    r.error('the highlights query does not compile: ' .. tostring(qerr), {
      'The parser and the queries come from different versions of grammars/tree-sitter-tessera: rebuild the parser',
    })
  end
end

function M.check()
  local r = reporter()
  local tessera, cfg = config()
  check_server(r, cfg)
  check_explorer(r, cfg)
  check_treesitter(r, tessera, cfg)
end

return M
