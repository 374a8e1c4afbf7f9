-- ember.text: the character and byte-level BPE tokenizers (runtime/data/tokenizer.c) round-trip
-- arbitrary bytes, BPE merges a hand-computed case, tokenizer files load back or fail
-- cleanly, and token streams give the same batches for the same (seed, epoch, sample)
-- whichever loader reads them, resume mid-epoch, and keep the validation tail apart.
-- fn fails with a message containing part.
local function raises(fn, part)
  local ok, err = pcall(fn)
  assert.is_false(ok)
  assert.is_truthy(tostring(err):find(part, 1, true), 'expected "' .. part .. '" in: ' .. tostring(err))
end
local text = ember.text
local data = ember.data

-- n bytes from a fixed LCG, every value 0..255 possible; the first two are 0 and 255.
local function random_bytes(n, seed)
  local out, x = { string.char(0), string.char(255) }, seed
  for i = 3, n do
    x = (x * 1103515245 + 12345) % 2147483648
    out[i] = string.char(math.floor(x / 65536) % 256)
  end
  return table.concat(out)
end

local UTF8 = 'naïve café — 日本語のテキスト, ελληνικά, emoji 🙂, NUL \0 end'

local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

describe('tokenizers', function()
  it('CharTokenizer: the distinct bytes, sorted, round-trip', function()
    local s = random_bytes(5000, 7)
    local tok = text.CharTokenizer(s)
    assert.are.equal(256, tok:vocab_size())   -- 5000 draws cover every byte value
    local ids = tok:encode(s)
    assert.are.equal(#s, ids:numel())
    assert.are.equal('int64', ids.dtype)
    assert.are.equal(s, tok:decode(ids))
    local u = text.CharTokenizer(UTF8)
    assert.are.equal(UTF8, u:decode(u:encode(UTF8)))
    -- ids are 1-based and ordered by byte value
    local abc = text.CharTokenizer('cabca')
    assert.are.same({ 3, 1, 2, 3, 1 }, abc:encode('cabca'):totable())
    assert.are.equal('b', abc:piece(2))
  end)

  it('CharTokenizer: a byte outside the vocabulary is an error naming it', function()
    local tok = text.CharTokenizer('abc')
    raises(function() tok:encode('abz') end, "byte 0x7a at position 2 is not in the character vocabulary")
    raises(function() tok:decode({ 4 }) end, 'outside 1..3')
  end)

  it('BPE: the hand-computed case aaabdaaabac', function()
    -- pairs: aa 4 -> Z; then Za 2 and ab 2 tie, the smaller pair (a, b) -> Y; then ZY 2 -> X
    local tok = text.BPETokenizer('aaabdaaabac', 259)
    local a, b = 97 + 1, 98 + 1   -- 1-based ids of the bytes
    assert.are.same({ { a, a }, { a, b }, { 257, 258 } }, tok:merges())
    local ids = tok:encode('aaabdaaabac')
    assert.are.same({ 259, 100 + 1, 259, a, 99 + 1 }, ids:totable())   -- X d X a c
    assert.are.equal('aaab', tok:piece(259))
    assert.are.equal('aaabdaaabac', tok:decode(ids))
  end)

  it('BPE: arbitrary bytes round-trip, also bytes never seen in training', function()
    local train = random_bytes(20000, 3):gsub('[\200-\255]', 'x') .. string.rep('the cat sat on the mat. ', 200)
    local tok = text.BPETokenizer(train, 400)
    assert.are.equal(400, tok:vocab_size())
    for _, s in ipairs { random_bytes(3000, 11), UTF8, '', string.rep('\255', 9), 'the cat sat' } do
      local ids = tok:encode(s)
      assert.are.equal(s, tok:decode(ids))
      if #s > 0 then assert.is_true(ids:min():item() >= 1 and ids:max():item() <= 400) end
    end
    -- frequent text compresses
    assert.is_true(tok:encode(string.rep('the cat sat on the mat. ', 10)):numel() < 240 / 3)
  end)

  it('BPE stops when no pair is left, and checks vocab_size', function()
    local tok = text.BPETokenizer('ab', 300)
    assert.are.equal(257, tok:vocab_size())
    raises(function() text.BPETokenizer('abc', 100) end, 'vocab_size must be in 256..8192')
  end)

  it('save and load give the same tokenizer; malformed files fail with the reason', function()
    local dir = test_tmpdir()
    local s = random_bytes(4000, 5)
    for _, tok in ipairs { text.CharTokenizer(s), text.BPETokenizer(s .. s:sub(1, 500), 300) } do
      local path = dir .. '/tok.txt'
      tok:save(path)
      local back = text.load(path)
      assert.are.equal(tok.kind, back.kind)
      assert.are.equal(tok:vocab_size(), back:vocab_size())
      assert.are.same(tok:encode(s):totable(), back:encode(s):totable())
      assert.are.equal(s, back:decode(back:encode(s)))
    end
    write(dir .. '/bad1.txt', 'ember-tokenizer 1\nkind bpe\nmerges 2\n97 97\n300 1\n')
    raises(function() text.load(dir .. '/bad1.txt') end, 'merge 1 must join two ids below 257')
    write(dir .. '/bad2.txt', 'ember-tokenizer 1\nkind char\nchars 3\n5 4 9\n')
    raises(function() text.load(dir .. '/bad2.txt') end, 'increasing byte values')
    write(dir .. '/bad3.txt', 'hello')
    raises(function() text.load(dir .. '/bad3.txt') end, "expected 'ember-tokenizer 1'")
    raises(function() text.load(dir .. '/missing.txt') end, 'cannot open')
  end)
end)

describe('token streams', function()
  local tokens = ember.arange(1, 1001, { dtype = 'int64' })   -- token k at position k

  it('samples [block] inputs and the next tokens as targets, inside their part', function()
    local tr = text.TokenStream(tokens, { block = 8, part = 'train', val_fraction = 0.1 })
    local va = text.TokenStream(tokens, { block = 8, part = 'val', val_fraction = 0.1 })
    assert.are.equal(math.floor(899 / 8), tr:size())
    assert.are.equal(math.floor(99 / 8), va:size())
    local l = data.DataLoader { dataset = tr, batch_size = 16, shuffle = true, seed = 3 }
    for b in l:epoch(1) do
      local x, y = b.x, b.y
      assert.are.same({ b.ids:numel(), 8 }, x.shape)
      assert.are.equal(0, (y - x - 1):abs():sum():item())   -- y is x shifted by one
      assert.is_true(y:max():item() <= 900)                 -- never reaches into the last tenth
    end
    local vb = data.DataLoader { dataset = va, batch_size = 100 }:epoch(0)()
    assert.are.same({ 901, 909 }, { vb.x[1][1]:item(), vb.x[2][1]:item() })   -- consecutive blocks of the tail
  end)

  it('the same (seed, epoch, sample) gives the same block; epochs differ', function()
    local tr = text.TokenStream(tokens, { block = 8, samples = 40 })
    local function epoch(seed, e)
      local l = data.DataLoader { dataset = tr, batch_size = 40, shuffle = true, seed = seed }
      local b = l:epoch(e)()
      return b.x:totable(), b.ids:totable()
    end
    local a1, ids1 = epoch(5, 1)
    local a2, ids2 = epoch(5, 1)
    assert.are.same(a1, a2)
    assert.are.same(ids1, ids2)
    assert.are_not.same(a1, (epoch(5, 2)))
    assert.are_not.same(a1, (epoch(6, 1)))
  end)

  it('resumes mid-epoch with the batches the unbroken epoch had', function()
    local tr = text.TokenStream(tokens, { block = 4, samples = 30 })
    local full = {}
    local l = data.DataLoader { dataset = tr, batch_size = 7, shuffle = true, seed = 9 }
    for b in l:epoch(2) do full[#full + 1] = b.x:totable() end
    local l2 = data.DataLoader { dataset = tr, batch_size = 7, shuffle = true, seed = 9 }
    local it = l2:epoch(2)
    it()
    it()
    local st = l2:state()
    local l3 = data.DataLoader { dataset = tr, batch_size = 7, shuffle = true, seed = 9 }
    l3:load_state(st)
    local k = 3
    for b in l3:epoch(2) do
      assert.are.same(full[k], b.x:totable())
      k = k + 1
    end
    assert.are.equal(#full + 1, k)
  end)

  it('a {format: text} source: reader processes deliver what the in-process loader does', function()
    local dir = test_tmpdir()
    local corpus = random_bytes(3000, 13):gsub('%z', 'z')
    write(dir .. '/a.txt', corpus:sub(1, 1500))
    write(dir .. '/b.txt', corpus:sub(1501))
    write(dir .. '/a.dat', 'index, skipped')
    local spec = { format = 'text', files = { dir .. '/*' }, exclude = { '*.dat' }, tokenizer = 'char', block = 16,
      samples = 24 }
    local c = text.corpus(spec)
    assert.are.equal(3000, c.bytes)
    assert.are.equal(corpus, c.tokenizer:decode(c.tokens))
    local rl = data.ReaderLoader { dataset = spec, batch_size = 8, shuffle = true, seed = 4, num_workers = 1,
      timeout = 60 }
    local ours = data.DataLoader { dataset = text.open_source(spec), batch_size = 8, shuffle = true, seed = 4 }
    local got, want = {}, {}
    for b in rl:epoch(1) do got[#got + 1] = b.x:totable() end
    rl:close()
    for b in ours:epoch(1) do want[#want + 1] = b.x:totable() end
    assert.are.equal(3, #got)
    assert.are.same(want, got)
    raises(function() data.ReaderLoader { dataset = { format = 'text', files = { dir .. '/*' }, blok = 3 } } end,
      "unknown key 'blok'")
  end)
end)
