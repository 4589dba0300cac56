-- Without any setup() call, the plugin configures itself with the defaults (cmd
-- { 'tessera', 'lsp' }): run with TESSERA_AUTOSETUP=1 and a file argument, as a user would:
--   TESSERA_AUTOSETUP=1 nvim --headless -u test/minimal_init.lua some.tsr -c 'luafile test/autosetup_test.lua'
local T = dofile(vim.g.tessera_test_root .. '/test/helpers.lua')

T.test('the defaults are set up after startup, for the file given on the command line', function()
  local messages = {}
  local orig = vim.notify
  vim.notify = function(msg)
    table.insert(messages, msg)
  end
  T.wait(2000, function()
    return require('tessera')._did_setup
  end, 'autosetup')
  vim.notify = orig
  T.eq(vim.bo.filetype, 'tessera', 'filetype of the argument')
  T.eq(require('tessera').config.cmd, { 'tessera', 'lsp' }, 'default cmd')
  if vim.fn.executable('tessera') == 1 then
    T.wait(10000, function()
      return require('tessera').get_client(0) ~= nil
    end, 'the tessera server')
  else
    T.eq(#messages, 1, 'one warning: ' .. vim.inspect(messages))
    T.ok(messages[1]:find('`tessera` not found', 1, true), messages[1])
  end
end)

T.finish('nvim-autosetup')
