-- Tree-sitter support (Neovim 0.10+ for `symbol_name`; skipped on older versions):
--   nvim --headless -u test/minimal_init.lua -c 'luafile test/treesitter_test.lua'
-- With $TESSERA_TS_PARSER naming a compiled tree-sitter-tessera (test/run.sh builds one when
-- a C compiler is around), the real grammar is used; else a stand-in parser shipped with
-- Neovim (the `query` grammar, loaded as language `tessera`) checks the plumbing: the parser
-- option, queries read from `queries_dir`, highlighting switched on.
local T = dofile(vim.g.tessera_test_root .. '/test/helpers.lua')

if vim.fn.has('nvim-0.10') == 0 then
  io.stdout:write('skipped: tree-sitter tests need Neovim 0.10+\n')
  T.finish('nvim-treesitter')
  return
end

local t = require('tessera')
local real = vim.env.TESSERA_TS_PARSER
if real == '' then
  real = nil
end

local function captures_at(buf, row, col)
  return vim.tbl_map(function(c)
    return c.capture
  end, vim.treesitter.get_captures_at_pos(buf, row, col))
end

if real then
  T.test('the real tree-sitter-tessera parser: parse, queries, highlighting', function()
    local qdir = t.default_queries_dir()
    local own_queries = vim.fn.filereadable(qdir .. '/highlights.scm') == 1
    if not own_queries then
      -- The grammar has no queries yet: use minimal ones over the node names of NODES.md.
      qdir = T.tmpdir('queries-real')
      T.write(qdir .. '/highlights.scm', { '(comment) @comment', '(string) @string', '(decorator) @attribute' })
    end
    t.setup({ autostart = false, parser = real, queries_dir = qdir })
    T.eq(t.setup_treesitter(), true, 'parser loaded')
    local dir = T.tmpdir('ts-real')
    T.write(dir .. '/k.tsr', {
      '@kernel  # a comment',
      'def saxpy(x: Tensor["n", f32], y: Tensor["n", f32], alpha: f32):',
      '    i = tile.linear_id()',
      '    y[i] = alpha * x[i] + y[i]',
    })
    vim.cmd('edit ' .. vim.fn.fnameescape(dir .. '/k.tsr'))
    local buf = vim.api.nvim_get_current_buf()
    local root = vim.treesitter.get_parser(buf, 'tessera'):parse()[1]:root()
    T.eq(root:type(), 'module', 'root node')
    T.eq(root:has_error(), false, 'no syntax error')
    T.eq(root:named_child(0):type(), 'decorated_definition', 'first statement')
    T.ok(vim.treesitter.highlighter.active[buf] ~= nil, 'highlighting on')
    T.ok(vim.treesitter.query.get('tessera', 'highlights') ~= nil, 'highlights query parses')
    if not own_queries then
      T.ok(vim.tbl_contains(captures_at(buf, 0, 12), 'comment'), 'comment: ' .. vim.inspect(captures_at(buf, 0, 12)))
      T.ok(vim.tbl_contains(captures_at(buf, 1, 20), 'string'), 'string: ' .. vim.inspect(captures_at(buf, 1, 20)))
    end
  end)
else
  T.test('a tessera parser + queries_dir turn tree-sitter highlighting on (stand-in parser)', function()
    local so = vim.api.nvim_get_runtime_file('parser/query.so', false)[1]
    if not so then
      io.stdout:write('skipped: this Neovim ships no parser/query.so\n')
      return
    end
    local qdir = T.tmpdir('queries')
    T.write(qdir .. '/highlights.scm', { '(comment) @comment', '(string) @string' })
    T.write(qdir .. '/folds.scm', { '(named_node) @fold' })
    t.setup({ autostart = false, parser = { path = so, symbol_name = 'query' }, queries_dir = qdir })
    local dir = T.tmpdir('ts')
    T.write(dir .. '/a.tsr', { '; a comment', '(identifier) @variable' })
    vim.cmd('edit ' .. vim.fn.fnameescape(dir .. '/a.tsr'))
    local buf = vim.api.nvim_get_current_buf()
    T.eq(vim.bo.filetype, 'tessera', 'filetype')
    T.ok(vim.treesitter.highlighter.active[buf] ~= nil, 'tree-sitter highlighter active')
    local q = vim.treesitter.query.get('tessera', 'highlights')
    T.ok(q and vim.tbl_contains(q.captures, 'comment') and vim.tbl_contains(q.captures, 'string'), 'highlights from queries_dir')
    T.ok(vim.treesitter.query.get('tessera', 'folds') ~= nil, 'folds from queries_dir')
    vim.treesitter.get_parser(buf, 'tessera'):parse()
    T.eq(captures_at(buf, 0, 2), { 'comment' }, 'capture at the comment')
  end)
end

--- Assertions of a grammar highlight fixture (grammars/tree-sitter-tessera/test/highlight):
--- `# ^^^ @neovim-name [@helix-name]` under a code line, `# <- @name` at the column of `#`.
local function fixture_assertions(lines)
  local out, target = {}, nil
  for i, line in ipairs(lines) do
    local indent, body = line:match('^(%s*)#%s*(.*)$')
    local parsed = false
    if body then
      local col0 = #indent
      local carets, name = body:match('^(%^+)%s+@([%w%._]+)')
      local arrow_name = body:match('^<%-%s+@([%w%._]+)')
      if carets and target then
        local first = line:find('^', 1, true) - 1
        for c = first, first + #carets - 1 do
          table.insert(out, { row = target - 1, col = c, expected = name, line = i })
        end
        parsed = true
      elseif arrow_name and target then
        table.insert(out, { row = target - 1, col = col0, expected = arrow_name, line = i })
        parsed = true
      end
    end
    if not parsed then
      target = i
    end
  end
  return out
end

if real then
  T.test('the highlight fixtures of the grammar, in this Neovim (the last pattern wins)', function()
    local probe = vim.treesitter.get_captures_at_pos
    local dir = vim.fn.fnamemodify(t.default_queries_dir() .. '/../test/highlight', ':p')
    local files = vim.fn.glob(dir .. '*.tsr', false, true)
    T.ok(#files > 0, 'fixtures in ' .. dir)
    t.setup({ autostart = false, parser = real })
    T.eq(t.setup_treesitter(), true, 'parser loaded')
    for _, name in ipairs({ 'highlights', 'locals', 'folds', 'indents', 'injections', 'textobjects' }) do
      local ok, q = pcall(vim.treesitter.query.get, 'tessera', name)
      T.ok(ok and q ~= nil, name .. '.scm parses in this Neovim: ' .. tostring(q))
    end
    local failures, checked = {}, 0
    for _, file in ipairs(files) do
      vim.cmd('edit ' .. vim.fn.fnameescape(file))
      local buf = vim.api.nvim_get_current_buf()
      T.ok(vim.treesitter.highlighter.active[buf] ~= nil, 'highlighting on for ' .. file)
      vim.treesitter.get_parser(buf, 'tessera'):parse()
      for _, a in ipairs(fixture_assertions(vim.api.nvim_buf_get_lines(buf, 0, -1, false))) do
        local best
        for _, c in ipairs(probe(buf, a.row, a.col)) do
          local shown = c.capture:sub(1, 1) ~= '_' and not vim.tbl_contains({ 'spell', 'nospell', 'conceal' }, c.capture)
          if shown and c.pattern_id == nil then
            io.stdout:write('skipped: this Neovim does not report pattern ids\n')
            return
          end
          if shown and (not best or c.pattern_id >= best.pattern_id) then
            best = c
          end
        end
        checked = checked + 1
        local got = best and best.capture or 'none'
        if got ~= a.expected then
          table.insert(failures, string.format('%s:%d: row %d col %d: expected @%s, shown @%s', file, a.line, a.row + 1, a.col + 1, a.expected, got))
        end
      end
    end
    T.ok(checked > 50, 'assertions checked: ' .. checked)
    T.ok(#failures == 0, table.concat(failures, '\n'))
  end)
end

T.finish('nvim-treesitter')
