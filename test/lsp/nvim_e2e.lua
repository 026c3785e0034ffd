-- accel-lsp in a real editor: headless Neovim (0.7.2 API) opens a training file, attaches accel-lsp, asks for
-- code actions on the epoch loop, applies "Distribute this training loop with accelerate" the way a user would
-- (vim.lsp.util.apply_workspace_edit in UTF-16) and writes the buffer. nvim_e2e.sh then compares the written
-- file with what accel-rewrite makes of the same file.
--
-- Run by nvim_e2e.sh as `nvim --headless --clean -n -S nvim_e2e.lua`, with these environment variables:
--   ACCEL_E2E_SERVER            the accel-lsp binary
--   ACCEL_E2E_SERVER_ARGS       optional: its arguments, separated by spaces (default: none)
--   ACCEL_E2E_FILE              the file to open and rewrite
--   ACCEL_E2E_WRITE_TO          optional: where to write the rewritten buffer (default: the file itself)
--   ACCEL_E2E_ROOT              the workspace root given to the server
--   ACCEL_E2E_SERVER_STDERR     optional: a file the server's stderr is appended to
--   ACCEL_E2E_REQUEST_TIMEOUT_S optional: how long the code action may take (default 300 s: the server parses
--                               libtorch's headers first)
-- Exits 0 when the file was rewritten and written; otherwise prints why, with what the server said, and
-- exits 1 (:cquit).
--
-- Besides the rewrite it checks what the editor relies on: the server advertises positionEncoding utf-16,
-- the action has kind refactor.rewrite and an inline WorkspaceEdit with documentChanges (one TextDocumentEdit
-- for this document at the version Neovim sent), "Explain what the rewrite would do" carries a command, and
-- the server publishes diagnostics for the document, and nothing the server says is about a compile database that
-- does not list the file (it must find the file's own command).

local ACTION_TITLE = 'Distribute this training loop with accelerate'
local ACTION_KIND = 'refactor.rewrite'
local EXPLAIN_TITLE = 'Explain what the rewrite would do'
local INIT_TIMEOUT_S = 60
local DIAGNOSTICS_TIMEOUT_S = 60
local SHUTDOWN_TIMEOUT_S = 10

local server = vim.env.ACCEL_E2E_SERVER
local file = vim.env.ACCEL_E2E_FILE
local root = vim.env.ACCEL_E2E_ROOT
local server_stderr = vim.env.ACCEL_E2E_SERVER_STDERR
local server_args = vim.split(vim.env.ACCEL_E2E_SERVER_ARGS or '', ' ', { trimempty = true })
local write_to = vim.env.ACCEL_E2E_WRITE_TO
local request_timeout_s = tonumber(vim.env.ACCEL_E2E_REQUEST_TIMEOUT_S or '300')

local started = vim.loop.hrtime()
local function elapsed() return (vim.loop.hrtime() - started) / 1e9 end

-- print() goes to stderr without a newline in headless mode: write lines to stdout instead.
local function say(fmt, ...)
  io.stdout:write(string.format('nvim_e2e [%6.1fs] ', elapsed()) .. string.format(fmt, ...) .. '\n')
  io.stdout:flush()
end

-- What the server told us, printed on failure (and the diagnostics on success too).
local server_messages = {} -- { kind, text }
local diagnostics = {}     -- real path of the file -> { version, list of LSP Diagnostic }
local server_exit = nil    -- { code, signal } once the server process ended

local function realpath(path) return vim.loop.fs_realpath(path) or path end

local severity_names = { 'error', 'warning', 'information', 'hint' }
local function format_diagnostic(d)
  return string.format('%d:%d: %s: %s%s', d.range.start.line + 1, d.range.start.character + 1,
    severity_names[d.severity or 1] or tostring(d.severity), d.message, d.source and (' [' .. d.source .. ']') or '')
end

local function dump_server_messages()
  if #server_messages == 0 then
    say('the server sent no window/logMessage or window/showMessage')
  end
  for _, m in ipairs(server_messages) do say('  server %s: %s', m[1], m[2]) end
  if next(diagnostics) == nil then say('the server published no diagnostics') end
  for path, d in pairs(diagnostics) do
    say('  diagnostics for %s (version %s): %d', path, tostring(d.version), #d.list)
    for _, diag in ipairs(d.list) do say('    %s', format_diagnostic(diag)) end
  end
  if server_exit then say('the server exited: code %s, signal %s', server_exit[1], server_exit[2]) end
end

local function fail(fmt, ...)
  say('FAIL: ' .. fmt, ...)
  dump_server_messages()
  io.stdout:flush()
  vim.cmd('cquit')
end

local function main()
  for name, value in pairs({ ACCEL_E2E_SERVER = server, ACCEL_E2E_FILE = file, ACCEL_E2E_ROOT = root }) do
    if not value or value == '' then return fail('%s is not set', name) end
  end
  if vim.fn.executable(server) ~= 1 then return fail('%s is not an executable', server) end

  vim.cmd('edit ' .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local buffer_path = realpath(vim.api.nvim_buf_get_name(bufnr))

  -- Neovim 0.7.2 applies documentChanges but does not say so; 0.8 and later do. Say it, as a current editor
  -- does, and offer UTF-16 the LSP 3.17 way.
  local capabilities = vim.lsp.protocol.make_client_capabilities()
  capabilities.workspace.workspaceEdit.documentChanges = true
  capabilities.general = { positionEncodings = { 'utf-16' } }

  local handlers = {
    ['textDocument/publishDiagnostics'] = function(err, result, ctx, config)
      if result and result.uri then
        diagnostics[realpath(vim.uri_to_fname(result.uri))] = { version = result.version, list = result.diagnostics or {} }
      end
      return vim.lsp.handlers['textDocument/publishDiagnostics'](err, result, ctx, config)
    end,
    ['window/logMessage'] = function(_, result)
      table.insert(server_messages, { 'log', result and result.message or '?' })
    end,
    ['window/showMessage'] = function(_, result)
      table.insert(server_messages, { 'message', result and result.message or '?' })
    end,
  }

  local cmd = { server, unpack(server_args) }
  if server_stderr and server_stderr ~= '' then
    -- The server's stderr to a file the driver prints on failure ($0 is the server, "$@" its arguments).
    cmd = { '/bin/sh', '-c', 'exec "$0" "$@" 2>>"$ACCEL_E2E_SERVER_STDERR"', server, unpack(server_args) }
  end
  local client_id = vim.lsp.start_client({
    name = 'accel-lsp',
    cmd = cmd,
    root_dir = root,
    capabilities = capabilities,
    handlers = handlers,
    get_language_id = function() return 'cpp' end,
    on_exit = function(code, signal) server_exit = { code, signal } end,
  })
  if not client_id then return fail('vim.lsp.start_client could not start %s', server) end
  say('started %s (client %d)', server, client_id)

  local initialized = vim.wait(INIT_TIMEOUT_S * 1000, function()
    local c = vim.lsp.get_client_by_id(client_id)
    return server_exit ~= nil or (c ~= nil and c.initialized == true)
  end, 50)
  local client = vim.lsp.get_client_by_id(client_id)
  if server_exit then return fail('the server exited before initialization finished') end
  if not initialized or not client then
    return fail('the server did not answer initialize within %d s', INIT_TIMEOUT_S)
  end
  local caps = client.server_capabilities
  say('initialized; server capabilities: positionEncoding=%s codeActionProvider=%s',
    tostring(caps.positionEncoding), vim.inspect(caps.codeActionProvider, { newline = '', indent = '' }))
  if caps.positionEncoding ~= 'utf-16' then
    return fail('the server advertises positionEncoding %s, expected "utf-16"', tostring(caps.positionEncoding))
  end
  if not caps.codeActionProvider then return fail('the server does not advertise codeActionProvider') end
  if not client.resolved_capabilities.text_document_open_close then
    return fail('the server does not ask for textDocument/didOpen (textDocumentSync.openClose)')
  end

  -- Sends textDocument/didOpen (version 0): the server starts parsing.
  if not vim.lsp.buf_attach_client(bufnr, client_id) then return fail('vim.lsp.buf_attach_client failed') end
  local uri = vim.uri_from_bufnr(bufnr)
  local version = vim.lsp.util.buf_versions[bufnr]
  say('attached %s (version %s)', uri, tostring(version))

  -- The epoch loop's line, as a user would put the cursor on it.
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local loop_line
  for i, line in ipairs(lines) do
    if line:match('^%s*for%s*%(.*epoch') then
      loop_line = i - 1
      break
    end
  end
  if not loop_line then return fail('no `for (... epoch ...)` line in %s', file) end
  local _, loop_line_utf16 = vim.str_utfindex(lines[loop_line + 1])
  local range = {
    start = { line = loop_line, character = 0 },
    ['end'] = { line = loop_line, character = loop_line_utf16 },
  }
  -- Like the editor: the diagnostics already published on that line (most likely none yet).
  local context_diagnostics = {}
  for _, d in ipairs((diagnostics[buffer_path] or {}).list or {}) do
    if d.range.start.line <= loop_line and d.range['end'].line >= loop_line then
      table.insert(context_diagnostics, d)
    end
  end
  local params = {
    textDocument = { uri = uri },
    range = range,
    context = { diagnostics = context_diagnostics },
  }

  -- vim.lsp.buf_request_sync, waiting also for the server to die so that a crash fails at once.
  say('textDocument/codeAction on line %d: %s', loop_line + 1, lines[loop_line + 1])
  local request_started = elapsed()
  local results
  local cancel = vim.lsp.buf_request_all(bufnr, 'textDocument/codeAction', params, function(r) results = r end)
  vim.wait(request_timeout_s * 1000, function() return results ~= nil or server_exit ~= nil end, 50)
  if not results then
    pcall(cancel) -- fails in Neovim 0.7.2 once the server has gone
    if server_exit then return fail('the server exited while answering textDocument/codeAction') end
    return fail('no answer to textDocument/codeAction within %d s', request_timeout_s)
  end
  say('textDocument/codeAction answered in %.1f s', elapsed() - request_started)
  local response = results[client_id]
  if not response then return fail('no response from client %d: %s', client_id, vim.inspect(results)) end
  if response.error then
    return fail('textDocument/codeAction failed: %s', vim.inspect(response.error))
  end
  local actions = response.result or {}
  for _, a in ipairs(actions) do
    say('  action %q kind=%s edit=%s command=%s', a.title, tostring(a.kind), a.edit and 'yes' or 'no',
      type(a.command) == 'table' and tostring(a.command.command) or tostring(a.command))
  end

  local action, explain
  for _, a in ipairs(actions) do
    if a.title == ACTION_TITLE then action = a end
    if a.title == EXPLAIN_TITLE then explain = a end
  end
  if not action then return fail('no code action titled %q among the %d returned', ACTION_TITLE, #actions) end
  if action.kind ~= ACTION_KIND then
    return fail('%q has kind %s, expected %s', ACTION_TITLE, tostring(action.kind), ACTION_KIND)
  end
  if not explain then return fail('no code action titled %q', EXPLAIN_TITLE) end
  if not (type(explain.command) == 'string' or (type(explain.command) == 'table' and type(explain.command.command) == 'string')) then
    return fail('%q carries no command: %s', EXPLAIN_TITLE, vim.inspect(explain))
  end

  local edit = action.edit
  if type(edit) ~= 'table' then
    return fail('%q carries no inline edit%s', ACTION_TITLE,
      action.data ~= nil and ' (it has data: the server expects codeAction/resolve)' or '')
  end
  local changes = edit.documentChanges
  if type(changes) ~= 'table' or #changes ~= 1 then
    return fail('the edit should hold documentChanges with one TextDocumentEdit: %s', vim.inspect(edit))
  end
  local text_document_edit = changes[1]
  if text_document_edit.kind ~= nil or type(text_document_edit.textDocument) ~= 'table' then
    return fail('documentChanges[1] is not a TextDocumentEdit: %s', vim.inspect(text_document_edit))
  end
  local edit_path = realpath(vim.uri_to_fname(text_document_edit.textDocument.uri))
  if edit_path ~= buffer_path then
    return fail('the edit is for %s, not for the open document %s', text_document_edit.textDocument.uri, uri)
  end
  if text_document_edit.textDocument.version ~= version then
    return fail('the edit is for version %s of the document; Neovim sent version %s',
      tostring(text_document_edit.textDocument.version), tostring(version))
  end
  if type(text_document_edit.edits) ~= 'table' or #text_document_edit.edits == 0 then
    return fail('the TextDocumentEdit holds no edits')
  end
  say('applying %d edits', #text_document_edit.edits)

  vim.lsp.util.apply_workspace_edit(edit, 'utf-16')
  if not vim.api.nvim_buf_get_option(bufnr, 'modified') then return fail('applying the edit changed nothing') end
  if write_to and write_to ~= '' then
    vim.cmd('silent write ' .. vim.fn.fnameescape(write_to)) -- the buffer stays the open file's; qall! drops it
    say('wrote %s', write_to)
  else
    vim.cmd('silent write')
    say('wrote %s', file)
  end

  -- The server publishes diagnostics for the document it parsed (by now, most likely, it has).
  vim.wait(DIAGNOSTICS_TIMEOUT_S * 1000, function() return diagnostics[buffer_path] ~= nil or server_exit ~= nil end, 50)
  if not diagnostics[buffer_path] then
    return fail('no textDocument/publishDiagnostics for %s within %d s', uri, DIAGNOSTICS_TIMEOUT_S)
  end
  local published = diagnostics[buffer_path]
  say('diagnostics published for the document (version %s): %d', tostring(published.version), #published.list)
  for _, d in ipairs(published.list) do say('  %s', format_diagnostic(d)) end
  -- The file's own compile command was found: no word of a database without it, or of a guessed command.
  local said = {}
  for _, m in ipairs(server_messages) do table.insert(said, m[2]) end
  for _, d in ipairs(published.list) do table.insert(said, d.message) end
  for _, text in ipairs(said) do
    if text:find('does not list this file', 1, true) or text:find('has no command for this file', 1, true)
        or text:find('no compile_commands.json', 1, true) then
      return fail('the server did not find the file\'s own compile command: %s', text)
    end
  end

  vim.lsp.stop_client(client_id)
  if not vim.wait(SHUTDOWN_TIMEOUT_S * 1000, function() return server_exit ~= nil end, 50) then
    say('warning: the server did not exit within %d s of shutdown/exit', SHUTDOWN_TIMEOUT_S)
  elseif server_exit[1] ~= 0 then
    say('warning: the server exited with code %s after shutdown/exit', tostring(server_exit[1]))
  end
  say('PASS')
  vim.cmd('qall!')
end

local ok, err = xpcall(main, debug.traceback)
if not ok then fail('error in the test script: %s', tostring(err)) end
-- main() quits Neovim on every path; never stay open waiting for input.
fail('the test script ended without quitting')
