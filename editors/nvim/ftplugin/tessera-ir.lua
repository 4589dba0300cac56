-- Lowered Tessera IR (the read-only buffers of :TesseraLower).
if vim.b.did_ftplugin then
  return
end
vim.b.did_ftplugin = 1

vim.opt_local.commentstring = '// %s'
vim.opt_local.shiftwidth = 2
vim.opt_local.expandtab = true
vim.opt_local.wrap = false
vim.b.undo_ftplugin = 'setlocal commentstring< shiftwidth< expandtab< wrap<'
