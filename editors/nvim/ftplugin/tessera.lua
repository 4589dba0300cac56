-- Buffer settings for Tessera (.tsr): Python-style indentation with 4 spaces.
if vim.b.did_ftplugin then
  return
end
vim.b.did_ftplugin = 1

local opt = vim.opt_local
opt.commentstring = '# %s'
opt.comments = { ':#' }
opt.shiftwidth = 4
opt.softtabstop = 4
opt.tabstop = 8
opt.expandtab = true
opt.suffixesadd = { '.tsr' }
opt.formatoptions:remove('t')
opt.formatoptions:append('croql')

vim.b.undo_ftplugin = 'setlocal commentstring< comments< shiftwidth< softtabstop< tabstop< expandtab< suffixesadd< formatoptions<'
