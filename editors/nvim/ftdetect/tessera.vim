" Tessera source files. A Vim script (not Lua) so that every Neovim from 0.7 on, and Vim,
" picks it up whether or not the Lua filetype detection is enabled.
autocmd BufRead,BufNewFile *.tsr setfiletype tessera
