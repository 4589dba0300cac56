-- Tiny test harness for `nvim --headless`: T.test(name, fn), T.eq(a, b), T.finish().
local T = { passed = 0, failed = 0 }

local function out(s)
  io.stdout:write(s .. '\n')
end

function T.eq(actual, expected, what)
  if not vim.deep_equal(actual, expected) then
    error(string.format('%s: expected %s, got %s', what or 'value', vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

function T.ok(cond, what)
  if not cond then
    error((what or 'assertion') .. ' failed', 2)
  end
end

function T.test(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if ok then
    T.passed = T.passed + 1
    out('ok     ' .. name)
  else
    T.failed = T.failed + 1
    out('FAILED ' .. name .. '\n' .. tostring(err))
  end
end

--- Waits (running the event loop) until cond() is true; errors after `ms`.
function T.wait(ms, cond, what)
  if not vim.wait(ms, cond, 20) then
    error('timed out waiting for ' .. (what or 'condition'), 2)
  end
end

function T.tmpdir(name)
  local dir = vim.fn.tempname() .. '/' .. name
  vim.fn.mkdir(dir, 'p')
  return dir
end

function T.write(path, lines)
  vim.fn.mkdir(vim.fn.fnamemodify(path, ':h'), 'p')
  vim.fn.writefile(lines, path)
end

function T.finish(suite)
  -- Deprecation warnings of newer Neovims are worth seeing (they do not fail the run).
  local messages = vim.api.nvim_exec('messages', true)
  for line in messages:gmatch('[^\n]+') do
    if line:lower():find('deprecat') then
      out('warning: ' .. line)
    end
  end
  out(string.format('%s: %d passed, %d failed', suite, T.passed, T.failed))
  if T.failed > 0 then
    vim.cmd('cquit 1')
  else
    vim.cmd('qall!')
  end
end

return T
