-- Tessera: user commands, and the language server started with the default configuration
-- unless `vim.g.tessera_autosetup = false` or require('tessera').setup{...} is called.
if vim.g.loaded_tessera then
  return
end
vim.g.loaded_tessera = 1

local api = vim.api

api.nvim_create_user_command('TesseraLower', function(args)
  require('tessera').cmd_lower(args.args)
end, {
  nargs = '?',
  complete = function(arglead)
    return require('tessera').complete_stage(arglead)
  end,
  desc = 'Tessera: show the IR of the kernel under the cursor (graph, sched, tile, target, all)',
})

api.nvim_create_user_command('TesseraExplore', function(args)
  require('tessera').explore({ kernel = args.args ~= '' and args.args or nil })
end, {
  nargs = '?',
  complete = function(arglead)
    return require('tessera').complete_kernel(arglead)
  end,
  desc = 'Tessera: open the IR explorer on the kernel under the cursor',
})

api.nvim_create_user_command('TesseraRun', function(args)
  require('tessera').run({ kernel = args.args ~= '' and args.args or nil })
end, {
  nargs = '?',
  complete = function(arglead)
    return require('tessera').complete_kernel(arglead)
  end,
  desc = 'Tessera: run the kernel under the cursor (tessera run)',
})

api.nvim_create_user_command('TesseraRestart', function()
  require('tessera').restart()
end, { desc = 'Tessera: restart the language server' })

-- setup() called from init.lua (before this file) or by a plugin manager right after loading
-- it (lazy.nvim's `opts`) wins; otherwise configure with the defaults once loading is done.
-- setup() also handles the tessera buffers opened in the meantime.
vim.schedule(function()
  if vim.g.tessera_autosetup ~= false and not require('tessera')._did_setup then
    require('tessera').setup()
  end
end)
