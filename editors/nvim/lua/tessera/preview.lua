-- Lowering previews: `tessera/lowering` results in scratch buffers (filetype tessera-ir),
-- with the source lines of the IR line under the cursor highlighted and back. A part of
-- the plugin (`require('tessera')` installs it), split out so each file stays readable;
-- it defines M.source_ranges, M.ir_lines, M.lower and M.refresh_previews.

--- Installs the previews into the plugin table `M`; `h` has the plugin's helpers
--- (notify, client_request, cursor_position, byte_index). Returns { buf_for_source }.
return function(M, h)
  local api = vim.api
  local notify, client_request, cursor_position, byte_index =
    h.notify, h.client_request, h.cursor_position, h.byte_index


  local ns_source = api.nvim_create_namespace('tessera_ir_source')
  local ns_ir = api.nvim_create_namespace('tessera_ir_lines')
  local previews = {} -- IR buffer -> { source = bufnr, kernel, stage, target, result }

  local function buf_for_source(uri)
    local buf = vim.uri_to_bufnr(uri)
    if not api.nvim_buf_is_loaded(buf) then
      vim.fn.bufload(buf)
    end
    return buf
  end

  local function split_lines(text)
    local lines = vim.split(text or '', '\n', { plain = true })
    if #lines > 1 and lines[#lines] == '' then
      table.remove(lines)
    end
    for i, l in ipairs(lines) do
      lines[i] = l:gsub('\r$', '')
    end
    return lines
  end

  local function highlight_ranges(bufnr, ns, ranges, enc)
    api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
    local count = api.nvim_buf_line_count(bufnr)
    for _, r in ipairs(ranges) do
      for l = r.start.line, math.min(r['end'].line, count - 1) do
        local text = api.nvim_buf_get_lines(bufnr, l, l + 1, false)[1] or ''
        local s = l == r.start.line and byte_index(text, r.start.character, enc) or 0
        local e = l == r['end'].line and byte_index(text, r['end'].character, enc) or -1
        api.nvim_buf_add_highlight(bufnr, ns, 'TesseraIrSource', l, s, e)
      end
    end
  end

  --- Source ranges produced by IR line `ir_line` (0-based).
  function M.source_ranges(source_map, ir_line)
    local out = {}
    for _, e in ipairs(source_map or {}) do
      if e.irLine == ir_line then
        table.insert(out, e.range)
      end
    end
    return out
  end

  --- IR lines (0-based) produced from source position `pos`.
  function M.ir_lines(source_map, pos)
    local out, seen = {}, {}
    for _, e in ipairs(source_map or {}) do
      if M.range_contains(e.range, pos) and not seen[e.irLine] then
        seen[e.irLine] = true
        table.insert(out, e.irLine)
      end
    end
    table.sort(out)
    return out
  end

  local function on_ir_cursor(irbuf)
    local p = previews[irbuf]
    if not p or not api.nvim_buf_is_valid(p.source) then
      return
    end
    local row = api.nvim_win_get_cursor(0)[1]
    local client = M.get_client(p.source)
    local ranges = M.source_ranges(p.result.sourceMap, row - 1)
    highlight_ranges(p.source, ns_source, ranges, client and client.offset_encoding or 'utf-16')
  end

  local function on_source_cursor(srcbuf)
    local pos
    for irbuf, p in pairs(previews) do
      if p.source == srcbuf and api.nvim_buf_is_valid(irbuf) then
        pos = pos or cursor_position(srcbuf, M.get_client(srcbuf))
        api.nvim_buf_clear_namespace(irbuf, ns_ir, 0, -1)
        for _, l in ipairs(M.ir_lines(p.result.sourceMap, pos)) do
          if l < api.nvim_buf_line_count(irbuf) then
            api.nvim_buf_add_highlight(irbuf, ns_ir, 'TesseraIrSource', l, 0, -1)
          end
        end
      end
    end
  end

  local function jump_to_source(irbuf)
    local p = previews[irbuf]
    if not p then
      return
    end
    local row = api.nvim_win_get_cursor(0)[1]
    local r = M.source_ranges(p.result.sourceMap, row - 1)[1]
    if not r or not api.nvim_buf_is_valid(p.source) then
      notify('no source location for this line', vim.log.levels.WARN)
      return
    end
    local wins = vim.fn.win_findbuf(p.source)
    if wins[1] then
      api.nvim_set_current_win(wins[1])
    else
      vim.cmd('wincmd p')
      api.nvim_win_set_buf(0, p.source)
    end
    local text = api.nvim_buf_get_lines(p.source, r.start.line, r.start.line + 1, false)[1] or ''
    local client = M.get_client(p.source)
    api.nvim_win_set_cursor(0, { r.start.line + 1, byte_index(text, r.start.character, client and client.offset_encoding or 'utf-16') })
  end

  local function fill_preview(irbuf, result)
    vim.bo[irbuf].modifiable = true
    api.nvim_buf_set_lines(irbuf, 0, -1, false, split_lines(result.text))
    vim.bo[irbuf].modifiable = false
    vim.bo[irbuf].modified = false
  end

  local function find_preview(source, kernel, stage, target)
    for irbuf, p in pairs(previews) do
      if not api.nvim_buf_is_valid(irbuf) then
        previews[irbuf] = nil
      elseif p.source == source and p.kernel == kernel and p.stage == stage and p.target == target then
        return irbuf
      end
    end
    return nil
  end

  local function open_preview(source, kernel, stage, target, result)
    local irbuf = find_preview(source, kernel, stage, target)
    if not irbuf then
      irbuf = api.nvim_create_buf(false, true)
      vim.bo[irbuf].buftype = 'nofile'
      vim.bo[irbuf].bufhidden = 'hide'
      vim.bo[irbuf].swapfile = false
      local base = vim.fn.fnamemodify(api.nvim_buf_get_name(source), ':t')
      pcall(api.nvim_buf_set_name, irbuf, string.format('tessera-ir://%s/%s.%s.%s', base, kernel, stage, target))
      previews[irbuf] = { source = source, kernel = kernel, stage = stage, target = target, result = result }
      local group = api.nvim_create_augroup('tessera_ir_' .. irbuf, { clear = true })
      api.nvim_create_autocmd('CursorMoved', {
        group = group,
        buffer = irbuf,
        callback = function()
          on_ir_cursor(irbuf)
        end,
      })
      api.nvim_create_autocmd({ 'BufWipeout' }, {
        group = group,
        buffer = irbuf,
        callback = function()
          previews[irbuf] = nil
          if api.nvim_buf_is_valid(source) then
            api.nvim_buf_clear_namespace(source, ns_source, 0, -1)
          end
        end,
      })
      vim.keymap.set('n', '<CR>', function()
        jump_to_source(irbuf)
      end, { buffer = irbuf, desc = 'Tessera: jump to the source of this IR line' })
      vim.keymap.set('n', 'q', '<cmd>close<CR>', { buffer = irbuf, desc = 'Close the IR preview' })
      local sgroup = api.nvim_create_augroup('tessera_src_' .. source, { clear = false })
      api.nvim_clear_autocmds({ group = sgroup, buffer = source })
      api.nvim_create_autocmd('CursorMoved', {
        group = sgroup,
        buffer = source,
        callback = function()
          on_source_cursor(source)
        end,
      })
    end
    previews[irbuf].result = result
    fill_preview(irbuf, result)
    vim.bo[irbuf].filetype = 'tessera-ir'

    if vim.fn.bufwinid(irbuf) == -1 then
      local cur = api.nvim_get_current_win()
      vim.cmd(M.config.split == 'horizontal' and 'belowright split' or 'belowright vsplit')
      api.nvim_win_set_buf(0, irbuf)
      vim.wo.wrap = false
      vim.wo.number = false
      if not M.config.focus_ir then
        api.nvim_set_current_win(cur)
      end
    end
    return irbuf
  end

  local function request_lowering(bufnr, kernel, stage, target, callback)
    local client = M.get_client(bufnr)
    if not client then
      callback('the Tessera language server is not attached to this buffer')
      return
    end
    local params = { uri = vim.uri_from_bufnr(bufnr), kernel = kernel, stage = stage }
    if vim.tbl_contains(M.TARGETS, target) then
      params.target = target
    end
    client_request(client, 'tessera/lowering', params, function(err, result)
      if err then
        callback(string.format('lowering %s (%s) failed: %s', kernel, stage, err.message or vim.inspect(err)))
      elseif type(result) ~= 'table' or type(result.text) ~= 'string' then
        callback('lowering: malformed response from the server')
      else
        result.sourceMap = result.sourceMap or {}
        callback(nil, result)
      end
    end, bufnr)
  end

  --- Lowers the kernel under the cursor (or `opts.kernel`) of the current buffer (or
  --- `opts.bufnr`) to `stage` and shows it in a scratch buffer (filetype tessera-ir) in a split.
  --- callback(err, result, irbuf) is called when done (err is a string).
  function M.lower(stage, callback, opts)
    opts = opts or {}
    callback = callback or function(err)
      if err and err ~= 'cancelled' then
        notify(err, vim.log.levels.ERROR)
      end
    end
    if not vim.tbl_contains(M.STAGES, stage) then
      callback(string.format('unknown stage %q (one of: %s)', tostring(stage), table.concat(M.STAGES, ', ')))
      return
    end
    local bufnr = (opts.bufnr == nil or opts.bufnr == 0) and api.nvim_get_current_buf() or opts.bufnr
    if vim.bo[bufnr].filetype ~= 'tessera' then
      callback('not a tessera buffer')
      return
    end
    if not M.get_client(bufnr) then
      callback('the Tessera language server is not attached to this buffer')
      return
    end
    local target = opts.target or M.config.target
    local function with_kernel(err, kernel)
      if err then
        callback(err)
        return
      end
      request_lowering(bufnr, kernel, stage, target, function(lerr, result)
        if lerr then
          callback(lerr)
          return
        end
        local irbuf = open_preview(bufnr, kernel, stage, target, result)
        callback(nil, result, irbuf)
      end)
    end
    if opts.kernel then
      with_kernel(nil, opts.kernel)
    else
      M.kernel_under_cursor(bufnr, with_kernel)
    end
  end

  --- Re-lowers every open preview of `bufnr` (called after a write). On an error the preview
  --- keeps its previous text and a warning says why.
  function M.refresh_previews(bufnr, callback)
    local pending = 0
    local function done()
      pending = pending - 1
      if pending == 0 and callback then
        callback()
      end
    end
    for irbuf, p in pairs(previews) do
      if p.source == bufnr and api.nvim_buf_is_valid(irbuf) then
        pending = pending + 1
        request_lowering(bufnr, p.kernel, p.stage, p.target, function(err, result)
          if err then
            notify(err .. ' (showing the previous lowering)', vim.log.levels.WARN)
          elseif api.nvim_buf_is_valid(irbuf) then
            p.result = result
            fill_preview(irbuf, result)
          end
          done()
        end)
      end
    end
    if pending == 0 and callback then
      callback()
    end
  end

  return { buf_for_source = buf_for_source }
end
