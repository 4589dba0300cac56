-- Tessera for Neovim: language server client, IR lowering previews, the terminal explorer.
--
-- Works on Neovim 0.7.2 (Debian bookworm) and later:
--   * 0.7:  vim.lsp.start_client + vim.lsp.buf_attach_client, one client per root directory;
--   * 0.8+: vim.lsp.start (which reuses a client per name and root by itself);
--   * 0.9+: tree-sitter highlighting when a compiled `tessera` parser is available, with the
--           queries of the repository's grammars/tree-sitter-tessera/queries/.
--
-- Everything the commands do is callable from Lua (and so headlessly):
--   require('tessera').lower(stage, callback)    -- :TesseraLower
--   require('tessera').explore(opts)             -- :TesseraExplore
--   require('tessera').run(opts)                 -- :TesseraRun
local M = {}

local api = vim.api
local uv = vim.loop

M.STAGES = { 'graph', 'sched', 'tile', 'target', 'all' }
M.TARGETS = { 'sm_90', 'sm_80', 'cpu' }

local defaults = {
  -- The language server command.
  cmd = { 'tessera', 'lsp' },
  -- The explorer; `FILE --kernel NAME` is appended. { 'tessera' } runs `tessera explore`.
  explore_cmd = { 'tessera-explore' },
  -- The runner; `FILE --kernel NAME` and `run_args` are appended.
  run_cmd = { 'tessera', 'run' },
  run_args = {},
  -- Target of lowering previews: 'sm_90', 'sm_80' or 'cpu'.
  target = 'sm_90',
  -- The root directory is the nearest ancestor holding one of these (else the file's directory).
  root_markers = { 'tessera.toml', '.git' },
  -- Start the server for every tessera buffer.
  autostart = true,
  -- Show and refresh the server's code lenses (▶ Explore, ⚡ Run).
  codelens = true,
  -- Save a modified buffer before :TesseraExplore / :TesseraRun (the tools read the file).
  save_before_run = true,
  -- :TesseraLower opens a 'vertical' or 'horizontal' split, and leaves the cursor in the
  -- source unless `focus_ir` is true.
  split = 'vertical',
  focus_ir = false,
  -- Tree-sitter (Neovim 0.9+): use it when a `tessera` parser can be loaded. `parser` may
  -- name the compiled parser (.so/.dll) when it is not in a runtimepath `parser/` folder
  -- (a string, or the options of vim.treesitter.language.add: { path = ..., symbol_name = ... });
  -- `queries_dir` defaults to the repository's grammars/tree-sitter-tessera/queries.
  treesitter = true,
  parser = nil,
  queries_dir = nil,
  -- Passed through to the client.
  on_attach = nil,
  capabilities = nil,
  settings = nil,
  init_options = nil,
}

M.config = vim.deepcopy(defaults)
M._did_setup = false

local function has(feature)
  return vim.fn.has(feature) == 1
end

local function notify(msg, level)
  vim.notify('tessera: ' .. msg, level or vim.log.levels.INFO)
end

local function as_list(v)
  if type(v) == 'string' then
    return { v }
  end
  return vim.deepcopy(v or {})
end

--- The folder of this plugin (editors/nvim in the repository).
function M.plugin_root()
  local src = debug.getinfo(1, 'S').source
  if src:sub(1, 1) == '@' then
    src = src:sub(2)
  end
  return vim.fn.fnamemodify(src, ':p:h:h:h')
end

--- editors/nvim/../../grammars/tree-sitter-tessera/queries, normalized.
function M.default_queries_dir()
  local dir = M.plugin_root() .. '/../../grammars/tree-sitter-tessera/queries'
  return vim.fn.fnamemodify(dir, ':p'):gsub('/$', '')
end

-- ---------------------------------------------------------------------------------------------
-- Pure helpers (unit-tested headlessly)

local function cmp_pos(a, b)
  if a.line ~= b.line then
    return a.line - b.line
  end
  return a.character - b.character
end

function M.range_contains(range, pos)
  return cmp_pos(range.start, pos) <= 0 and cmp_pos(pos, range['end']) <= 0
end

local function range_size(r)
  return (r['end'].line - r.start.line) * 1000000 + (r['end'].character - r.start.character)
end

--- Kernels sorted by start position (a new list).
function M.sort_kernels(kernels)
  local out = vim.deepcopy(kernels)
  table.sort(out, function(a, b)
    return cmp_pos(a.range.start, b.range.start) < 0
  end)
  return out
end

--- The kernel under `pos` ({line, character}, 0-based): the innermost whose range contains it;
--- with header-only (single-line) ranges, the last one starting at or before the line.
function M.kernel_at(kernels, pos)
  local best
  for _, k in ipairs(kernels or {}) do
    if M.range_contains(k.range, pos) and (not best or range_size(k.range) < range_size(best.range)) then
      best = k
    end
  end
  if best or not kernels or #kernels == 0 then
    return best
  end
  for _, k in ipairs(kernels) do
    if k.range.start.line ~= k.range['end'].line then
      return nil
    end
  end
  local last
  for _, k in ipairs(M.sort_kernels(kernels)) do
    if k.range.start.line <= pos.line then
      last = k
    end
  end
  return last
end

local function bracket_delta(line)
  local d, quote, i = 0, nil, 1
  while i <= #line do
    local c = line:sub(i, i)
    if quote then
      if c == '\\' then
        i = i + 1
      elseif c == quote then
        quote = nil
      end
    elseif c == '#' then
      break
    elseif c == '"' or c == "'" then
      quote = c
    elseif c == '(' or c == '[' or c == '{' then
      d = d + 1
    elseif c == ')' or c == ']' or c == '}' then
      d = d - 1
    end
    i = i + 1
  end
  return d
end

--- Kernels read from the text (for completion, and Explore/Run without a server): defs
--- decorated with @kernel..., @jit or @autodiff, optionally behind a module alias (@ts.kernel).
function M.scan_kernels(lines)
  local out = {}
  local first, kind, depth = nil, nil, 0
  local i = 1
  while i <= #lines do
    local line = lines[i]:gsub('\r$', '')
    if depth > 0 then
      depth = depth + bracket_delta(line)
    elseif line:sub(1, 1) == '@' then
      first = first or i
      local name = line:match('^@%s*([%w_%.]+)')
      if name then
        name = name:gsub('^[%a_][%w_]*%.(kernel)', '%1')
        local k = name:match('^(kernel[%.%w_]*)$') or name:match('^[%a_][%w_]*%.(jit)$')
          or name:match('^(jit)$') or name:match('^[%a_][%w_]*%.(autodiff)$') or name:match('^(autodiff)$')
        if k and (not kind or (k:sub(1, 6) == 'kernel' and kind:sub(1, 6) ~= 'kernel')) then
          kind = k
        end
      end
      depth = math.max(0, bracket_delta(line))
    else
      local def = line:match('^def%s+([%a_][%w_]*)')
      if def and kind then
        local last, d = i, 0
        local j = i
        while j <= #lines do
          local l = lines[j]:gsub('\r$', '')
          if j > i and d <= 0 and l:match('^%S') and l:sub(1, 1) ~= '#' then
            break
          end
          d = d + bracket_delta(l)
          if l:match('%S') and not l:match('^%s*#') then
            last = j
          end
          j = j + 1
        end
        table.insert(out, {
          name = def,
          kind = kind,
          range = {
            start = { line = (first or i) - 1, character = 0 },
            ['end'] = { line = last - 1, character = #(lines[last]:gsub('\r$', '')) },
          },
        })
      end
      if line:match('%S') and line:sub(1, 1) ~= '#' then
        first, kind = nil, nil
      end
    end
    i = i + 1
  end
  return out
end

local function program_base(p)
  return (p:gsub('^.*[/\\]', ''):lower():gsub('%.exe$', ''))
end

--- argv of the explorer: explore_cmd FILE --kernel NAME (`tessera explore ...` for the CLI).
function M.explore_argv(explore_cmd, file, kernel)
  local argv = as_list(explore_cmd)
  if #argv == 0 then
    argv = { 'tessera-explore' }
  end
  if #argv == 1 and program_base(argv[1]) == 'tessera' then
    table.insert(argv, 'explore')
  end
  vim.list_extend(argv, { file, '--kernel', kernel })
  return argv
end

--- argv of the runner: run_cmd FILE --kernel NAME [run_args...].
function M.run_argv(run_cmd, file, kernel, extra)
  local argv = as_list(run_cmd)
  if #argv == 0 then
    argv = { 'tessera', 'run' }
  end
  vim.list_extend(argv, { file, '--kernel', kernel })
  vim.list_extend(argv, as_list(extra))
  return argv
end

--- Root directory of `path`: the nearest ancestor holding a root marker, else its directory.
function M.root_dir(path, markers)
  markers = markers or M.config.root_markers
  local dir = vim.fn.fnamemodify(path, ':p:h')
  local cur = dir
  while true do
    for _, marker in ipairs(markers) do
      if uv.fs_stat(cur .. '/' .. marker) then
        return cur
      end
    end
    local parent = vim.fn.fnamemodify(cur, ':h')
    if parent == cur then
      return dir
    end
    cur = parent
  end
end

-- Character index (in the client's position encoding) <-> byte index, on one line.
local function char_index(line, byte_col, enc)
  if enc == 'utf-8' then
    return byte_col
  end
  byte_col = math.min(byte_col, #line)
  local ok, a, b
  if has('nvim-0.11') then
    ok, a = pcall(vim.str_utfindex, line, enc == 'utf-32' and 'utf-32' or 'utf-16', byte_col, false)
    return ok and a or byte_col
  end
  ok, a, b = pcall(vim.str_utfindex, line, byte_col)
  if not ok then
    return byte_col
  end
  return enc == 'utf-32' and a or b
end

local function byte_index(line, char, enc)
  if enc == 'utf-8' then
    return math.min(char, #line)
  end
  local ok, r
  if has('nvim-0.11') then
    ok, r = pcall(vim.str_byteindex, line, enc == 'utf-32' and 'utf-32' or 'utf-16', char, false)
  else
    ok, r = pcall(vim.str_byteindex, line, char, enc ~= 'utf-32')
  end
  if ok and r then
    return r
  end
  return #line
end

M._char_index = char_index
M._byte_index = byte_index

-- ---------------------------------------------------------------------------------------------
-- The language client

local clients_by_root = {} -- 0.7 only: root dir -> client id
local warned_missing = false

local function client_request(client, method, params, handler, bufnr)
  if has('nvim-0.11') then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

--- The tessera client attached to `bufnr` (nil if none).
function M.get_client(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  if vim.lsp.get_clients then
    return vim.lsp.get_clients({ bufnr = bufnr, name = 'tessera' })[1]
  end
  if has('nvim-0.8') then
    return vim.lsp.get_active_clients({ bufnr = bufnr, name = 'tessera' })[1]
  end
  for _, c in pairs(vim.lsp.buf_get_clients(bufnr)) do
    if c.name == 'tessera' then
      return c
    end
  end
  return nil
end

local function setup_codelens(client, bufnr)
  if not M.config.codelens or not (client.server_capabilities or {}).codeLensProvider then
    return
  end
  local group = api.nvim_create_augroup('tessera_codelens_' .. bufnr, { clear = true })
  local function refresh()
    if api.nvim_buf_is_valid(bufnr) and api.nvim_get_current_buf() == bufnr then
      pcall(vim.lsp.codelens.refresh, { bufnr = bufnr })
    end
  end
  api.nvim_create_autocmd({ 'BufEnter', 'InsertLeave', 'BufWritePost', 'CursorHold' }, {
    group = group,
    buffer = bufnr,
    callback = refresh,
  })
  refresh()
end

local function client_config(root)
  local capabilities = M.config.capabilities or vim.lsp.protocol.make_client_capabilities()
  return {
    name = 'tessera',
    cmd = as_list(M.config.cmd),
    root_dir = root,
    workspace_folders = { { uri = vim.uri_from_fname(root), name = root } },
    capabilities = capabilities,
    init_options = vim.tbl_extend('force', { target = M.config.target }, M.config.init_options or {}),
    settings = M.config.settings or { tessera = { target = M.config.target } },
    commands = M.commands,
    on_attach = function(client, bufnr)
      setup_codelens(client, bufnr)
      if M.config.on_attach then
        M.config.on_attach(client, bufnr)
      end
    end,
    on_exit = function(_, _, client_id)
      for root_dir, id in pairs(clients_by_root) do
        if id == client_id then
          clients_by_root[root_dir] = nil
        end
      end
    end,
  }
end

--- Starts the server for `bufnr` (or attaches the running one of its root directory).
--- Returns the client id, or nil.
function M.start(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  local fname = api.nvim_buf_get_name(bufnr)
  if fname == '' or vim.bo[bufnr].buftype ~= '' then
    return nil
  end
  local cmd = as_list(M.config.cmd)
  if #cmd == 0 or vim.fn.executable(cmd[1]) ~= 1 then
    if not warned_missing then
      warned_missing = true
      notify(
        string.format('language server `%s` not found (set `cmd` in require("tessera").setup{})', cmd[1] or ''),
        vim.log.levels.WARN
      )
    end
    return nil
  end
  local root = M.root_dir(fname)
  if vim.lsp.start then
    return vim.lsp.start(client_config(root), { bufnr = bufnr })
  end
  local id = clients_by_root[root]
  local client = id and vim.lsp.get_client_by_id(id)
  if not client or client.is_stopped() then
    id = vim.lsp.start_client(client_config(root))
    if not id then
      return nil
    end
    clients_by_root[root] = id
  end
  vim.lsp.buf_attach_client(bufnr, id)
  return id
end

--- Stops every tessera client and starts them again for the open tessera buffers.
function M.restart()
  local ids = {}
  local clients = vim.lsp.get_clients and vim.lsp.get_clients({ name = 'tessera' }) or vim.lsp.get_active_clients()
  for _, c in pairs(clients) do
    if c.name == 'tessera' then
      table.insert(ids, c.id)
    end
  end
  vim.lsp.stop_client(ids)
  clients_by_root = {}
  -- Wait for the old clients to exit, so that vim.lsp.start does not reuse a dying one.
  vim.wait(3000, function()
    for _, id in ipairs(ids) do
      if vim.lsp.get_client_by_id(id) then
        return false
      end
    end
    return true
  end, 50)
  for _, buf in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(buf) and vim.bo[buf].filetype == 'tessera' then
      M.start(buf)
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- Kernels

local function cursor_position(bufnr, client)
  local win = api.nvim_get_current_win()
  if api.nvim_win_get_buf(win) ~= bufnr then
    local wins = vim.fn.win_findbuf(bufnr)
    win = wins[1] or win
  end
  local row, col = unpack(api.nvim_win_get_cursor(win))
  local line = api.nvim_buf_get_lines(bufnr, row - 1, row, false)[1] or ''
  local enc = client and client.offset_encoding or 'utf-16'
  return { line = row - 1, character = char_index(line, col, enc) }
end

--- callback(err, kernels): the kernels of `bufnr` from `tessera/kernels`, or read from the
--- text when no server is attached.
function M.kernels(bufnr, callback)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  local client = M.get_client(bufnr)
  if not client then
    callback(nil, M.scan_kernels(api.nvim_buf_get_lines(bufnr, 0, -1, false)), false)
    return
  end
  local params = { uri = vim.uri_from_bufnr(bufnr) }
  client_request(client, 'tessera/kernels', params, function(err, result)
    if err then
      callback(err, nil, true)
    else
      callback(nil, result or {}, true)
    end
  end, bufnr)
end

--- callback(err, name): the kernel under the cursor of `bufnr`; asks with vim.ui.select when
--- the cursor is outside every kernel and there are several.
function M.kernel_under_cursor(bufnr, callback)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  M.kernels(bufnr, function(err, kernels)
    if err then
      callback(err.message or tostring(err))
      return
    end
    if #kernels == 0 then
      callback('no kernels or graph functions in this file')
      return
    end
    local k = M.kernel_at(kernels, cursor_position(bufnr, M.get_client(bufnr)))
    if k then
      callback(nil, k.name)
    elseif #kernels == 1 then
      callback(nil, kernels[1].name)
    else
      local sorted = M.sort_kernels(kernels)
      vim.ui.select(sorted, {
        prompt = 'Tessera kernel: ',
        format_item = function(item)
          return string.format('%s  (%s, line %d)', item.name, item.kind, item.range.start.line + 1)
        end,
      }, function(choice)
        if choice then
          callback(nil, choice.name)
        else
          callback('cancelled')
        end
      end)
    end
  end)
end

-- ---------------------------------------------------------------------------------------------
-- Lowering previews (preview.lua)

local buf_for_source = require('tessera.preview')(M, {
  notify = notify,
  client_request = client_request,
  cursor_position = cursor_position,
  byte_index = byte_index,
}).buf_for_source

-- ---------------------------------------------------------------------------------------------
-- Explore / Run in a terminal split

local function open_terminal(argv, cwd)
  local exe = argv[1]
  if vim.fn.executable(exe) ~= 1 then
    notify(string.format('`%s` not found', exe), vim.log.levels.ERROR)
    return nil
  end
  vim.cmd('botright new')
  local height = math.max(10, math.floor(vim.o.lines * 0.6))
  pcall(api.nvim_win_set_height, 0, height)
  local ok, job
  if has('nvim-0.11') then
    ok, job = pcall(vim.fn.jobstart, argv, { cwd = cwd, term = true })
  else
    ok, job = pcall(vim.fn.termopen, argv, { cwd = cwd })
  end
  if not ok or job <= 0 then
    notify('could not start ' .. table.concat(argv, ' ') .. ': ' .. tostring(job), vim.log.levels.ERROR)
    return nil
  end
  vim.cmd('startinsert')
  return job
end

local function target_buffer(opts)
  if opts.uri then
    return buf_for_source(opts.uri)
  end
  return (opts.bufnr == nil or opts.bufnr == 0) and api.nvim_get_current_buf() or opts.bufnr
end

local function explore_or_run(action, opts)
  opts = opts or {}
  local bufnr = target_buffer(opts)
  local file = api.nvim_buf_get_name(bufnr)
  if file == '' then
    notify('save the buffer to a file first', vim.log.levels.ERROR)
    return
  end
  file = vim.fn.fnamemodify(file, ':p')
  local function go(err, kernel)
    if err then
      if err ~= 'cancelled' then
        notify(err, vim.log.levels.ERROR)
      end
      return
    end
    if M.config.save_before_run and vim.bo[bufnr].modified then
      api.nvim_buf_call(bufnr, function()
        vim.cmd('silent update')
      end)
    end
    local argv
    if action == 'explore' then
      argv = M.explore_argv(M.config.explore_cmd, file, kernel)
    else
      argv = M.run_argv(M.config.run_cmd, file, kernel, M.config.run_args)
    end
    local job = open_terminal(argv, M.root_dir(file))
    if opts.on_start then
      opts.on_start(job, argv)
    end
  end
  if opts.kernel and opts.kernel ~= '' then
    go(nil, opts.kernel)
  else
    M.kernel_under_cursor(bufnr, go)
  end
end

--- Opens a terminal split running the explorer on the file and the kernel under the cursor.
--- opts: { kernel?, bufnr?, uri?, on_start?(job, argv) }
function M.explore(opts)
  explore_or_run('explore', opts)
end

--- Opens a terminal split running `tessera run FILE --kernel NAME`. opts as for explore().
function M.run(opts)
  explore_or_run('run', opts)
end

-- Client-side handlers of the code-lens commands; arguments are [uri, kernel].
M.commands = {
  ['tessera.explore'] = function(command)
    local args = command.arguments or {}
    M.explore({ uri = args[1], kernel = args[2] })
  end,
  ['tessera.run'] = function(command)
    local args = command.arguments or {}
    M.run({ uri = args[1], kernel = args[2] })
  end,
}

-- ---------------------------------------------------------------------------------------------
-- Tree-sitter (Neovim 0.9+)

local ts_state -- nil: not tried; true/false: parser available

--- Loads the `tessera` parser and registers the repository's queries. Returns true when
--- tree-sitter can be used.
function M.setup_treesitter()
  if ts_state ~= nil then
    return ts_state
  end
  ts_state = false
  if not M.config.treesitter or not has('nvim-0.9') then
    return false
  end
  local popts = M.config.parser
  if type(popts) == 'string' then
    popts = { path = popts }
  end
  local ok, res = pcall(vim.treesitter.language.add, 'tessera', popts)
  if not ok or res == false or not pcall(vim.treesitter.language.inspect, 'tessera') then
    return false
  end
  local dir = M.config.queries_dir or M.default_queries_dir()
  for _, name in ipairs({ 'highlights', 'locals', 'folds', 'indents', 'injections', 'textobjects', 'tags' }) do
    local path = dir .. '/' .. name .. '.scm'
    -- Queries installed in the runtimepath (queries/tessera/*.scm, e.g. by nvim-treesitter)
    -- win over the repository's copy.
    if vim.fn.filereadable(path) == 1 and #vim.treesitter.query.get_files('tessera', name) == 0 then
      local text = table.concat(vim.fn.readfile(path), '\n')
      local qok, qerr = pcall(vim.treesitter.query.set, 'tessera', name, text)
      if not qok then
        notify(string.format('cannot use %s: %s', path, qerr), vim.log.levels.WARN)
      end
    end
  end
  ts_state = true
  return true
end

-- ---------------------------------------------------------------------------------------------
-- Setup

local function on_filetype(bufnr)
  if M.setup_treesitter() then
    pcall(vim.treesitter.start, bufnr, 'tessera')
  end
  if M.config.autostart then
    M.start(bufnr)
  end
end

--- Configures the plugin (all keys optional; see :help tessera-setup). May be called again
--- to change the configuration.
function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(defaults), opts or {})
  -- Lists are replaced, not merged.
  for _, key in ipairs({ 'cmd', 'explore_cmd', 'run_cmd', 'run_args', 'root_markers' }) do
    if opts and opts[key] ~= nil then
      M.config[key] = as_list(opts[key])
    end
  end
  M._did_setup = true
  warned_missing = false
  ts_state = nil
  vim.cmd('highlight default link TesseraIrSource Visual')

  for name, fn in pairs(M.commands) do
    if vim.lsp.commands[name] == nil then
      vim.lsp.commands[name] = fn
    end
  end

  local group = api.nvim_create_augroup('tessera', { clear = true })
  api.nvim_create_autocmd('FileType', {
    group = group,
    pattern = 'tessera',
    callback = function(args)
      on_filetype(args.buf)
    end,
  })
  api.nvim_create_autocmd('BufWritePost', {
    group = group,
    pattern = '*.tsr',
    callback = function(args)
      M.refresh_previews(args.buf)
    end,
  })
  -- Buffers already open when setup() runs (e.g. a lazy-loaded plugin).
  for _, buf in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(buf) and vim.bo[buf].filetype == 'tessera' then
      on_filetype(buf)
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- Commands (defined by plugin/tessera.lua)

function M.complete_stage(arglead)
  return vim.tbl_filter(function(s)
    return s:sub(1, #arglead) == arglead
  end, M.STAGES)
end

function M.complete_kernel(arglead)
  local names = {}
  for _, k in ipairs(M.scan_kernels(api.nvim_buf_get_lines(0, 0, -1, false))) do
    if k.name:sub(1, #arglead) == arglead then
      table.insert(names, k.name)
    end
  end
  return names
end

function M.cmd_lower(stage)
  if stage == nil or stage == '' then
    vim.ui.select(M.STAGES, { prompt = 'Tessera stage: ' }, function(choice)
      if choice then
        M.lower(choice)
      end
    end)
  else
    M.lower(stage)
  end
end

return M
