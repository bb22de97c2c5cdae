-- Neovim's own LSP client (vim.lsp, as in Debian's neovim 0.7) driving `accelopt lsp`: run by
-- scripts/neovim_lsp_smoke.sh in a scratch folder holding silu.py, silu_ref.py and broken.py.
-- Each step is a check; the last line of $OUT is "N passed, N failed".
local py = os.getenv("PY")
local out, passed, failed = {}, 0, 0
local function say(s) table.insert(out, s); vim.fn.writefile(out, os.getenv("OUT")) end
local function check(name, ok, detail)
  if ok then passed = passed + 1 else failed = failed + 1 end
  say((ok and "ok   " or "FAIL ") .. name .. (detail and (": " .. detail) or ""))
end
local diags = {}
local client_id = vim.lsp.start_client({
  cmd = { py, "-m", "accelopt", "lsp" },
  root_dir = vim.fn.getcwd(),
  init_options = { workspaceTrusted = true, inputSize = "small", diagnosticsDelayS = 0.05,
    memoryPath = vim.fn.getcwd() .. "/memory.sqlite",
    search = { iterations = 1, beamWidth = 1, plansPerCandidate = 2, samplesPerPlan = 1, correctnessSeeds = 1 } },
  handlers = {
    ["textDocument/publishDiagnostics"] = function(err, result, ctx, config)
      diags[result.uri] = result.diagnostics
      vim.lsp.diagnostic.on_publish_diagnostics(err, result, ctx, config)
    end,
  },
})
assert(client_id, "no client")
vim.cmd("edit silu.py")
local silu = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(silu, client_id)
vim.cmd("edit broken.py")
local broken = vim.api.nvim_get_current_buf()
vim.lsp.buf_attach_client(broken, client_id)
local broken_uri = vim.uri_from_bufnr(broken)
local ok = vim.wait(60000, function() return diags[broken_uri] ~= nil and #diags[broken_uri] > 0 end, 100)
check("a broken NKI rule is a diagnostic at its line", ok and diags[broken_uri][1].range.start.line == 10
  and diags[broken_uri][1].message:find("err_num_partition_exceed_arch_limit") ~= nil, ok and diags[broken_uri][1].message or "none")
-- hover the kernel's name until its profile has landed
vim.api.nvim_set_current_buf(silu)
local line = vim.fn.search("def silu_kernel") - 1
local hover_text = ""
vim.wait(60000, function()
  local res = vim.lsp.buf_request_sync(silu, "textDocument/hover", {
    textDocument = { uri = vim.uri_from_bufnr(silu) }, position = { line = line, character = 6 } }, 10000)
  local r = res and res[client_id] and res[client_id].result
  hover_text = r and r.contents.value or ""
  return hover_text:find("of peak") ~= nil
end, 200)
check("hover shows the simulated profile", hover_text:find("simulated on trn1") ~= nil, hover_text:gsub("\n", " "):sub(1, 100))
local lenses = vim.lsp.buf_request_sync(silu, "textDocument/codeLens", { textDocument = { uri = vim.uri_from_bufnr(silu) } }, 10000)
local titles = {}
for _, l in ipairs((lenses[client_id] or {}).result or {}) do table.insert(titles, l.command and l.command.title or "?") end
check("code lenses: percent of peak and Optimize", table.concat(titles, " | "):find("of peak", 1, true) ~= nil
  and vim.tbl_contains(titles, "Optimize"), table.concat(titles, " | "))
local actions = vim.lsp.buf_request_sync(silu, "textDocument/codeAction", {
  textDocument = { uri = vim.uri_from_bufnr(silu) },
  range = { start = { line = line, character = 0 }, ["end"] = { line = line, character = 0 } },
  context = { diagnostics = {} } }, 10000)
local names = {}
for _, a in ipairs((actions[client_id] or {}).result or {}) do table.insert(names, a.title) end
check("the Optimize code action", table.concat(names, " | "):find("Optimize kernel `silu_kernel`") ~= nil, table.concat(names, " | "))
-- the Optimize command as the code lens runs it; then the candidates, and apply the best
local started = vim.lsp.buf_request_sync(silu, "workspace/executeCommand", { command = "accelopt.optimize",
  arguments = { vim.uri_from_bufnr(silu), "silu_kernel" } }, 30000)
local sid = started[client_id].result.searchId
check("the Optimize command starts a search", sid ~= nil and sid ~= vim.NIL, tostring(sid))
local state
vim.wait(120000, function()
  local r = vim.lsp.buf_request_sync(silu, "accelopt/candidates", { searchId = sid }, 10000)
  state = r and r[client_id] and r[client_id].result
  return state ~= nil and state.running == false
end, 300)
check("the search ends with candidates", state ~= nil and #state.candidates > 0, state and (#state.candidates .. " candidates") or "no answer")
if #state.candidates > 0 then
  local before = table.concat(vim.api.nvim_buf_get_lines(silu, 0, -1, false), "\n")
  local applied = vim.lsp.buf_request_sync(silu, "workspace/executeCommand", { command = "accelopt.applyCandidate",
    arguments = { sid, state.candidates[1].id } }, 30000)
  local after = table.concat(vim.api.nvim_buf_get_lines(silu, 0, -1, false), "\n") .. "\n"
  check("the best candidate is applied to the buffer", applied[client_id].result.applied and after == state.candidates[1].text
    and before ~= after, applied[client_id].result.message)
end
vim.lsp.stop_client(client_id)
vim.wait(10000, function() return vim.lsp.client_is_stopped(client_id) end, 100)
check("the server stops on shutdown and exit", vim.lsp.client_is_stopped(client_id))
say(passed .. " passed, " .. failed .. " failed")
vim.cmd("qa!")
