-- A clean Neovim for the tests: only $VIMRUNTIME and this plugin on the runtimepath.
local root = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h:h')
local rtp = { root, vim.env.VIMRUNTIME }
-- Keep the folder of the parsers bundled with Neovim (…/lib/nvim), used by the tree-sitter test.
for _, dir in ipairs(vim.opt.runtimepath:get()) do
  if dir:match('lib/nvim$') then
    table.insert(rtp, dir)
  end
end
table.insert(rtp, root .. '/after')
vim.opt.runtimepath = rtp
vim.opt.packpath = { vim.env.VIMRUNTIME }
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
vim.g.tessera_test_root = root
-- The tests call setup() themselves, with the fake server (autosetup_test.lua sets
-- TESSERA_AUTOSETUP=1 to test the default configuration).
vim.g.tessera_autosetup = vim.env.TESSERA_AUTOSETUP == '1'
vim.cmd('filetype plugin indent on')
vim.cmd('syntax on')
