-- pandoc filter for scripts/docs-rst.sh: one page of docs/*.md as an extra doc of the collection's docs site
-- (docs/docsite/rst/<page>.rst), where labels are global and must start with the collection's prefix.
--   * every heading gets the label PREFIX<page>.<its GitHub anchor> (the page's first heading PREFIX<page>);
--   * a link to another page of docs/ (page.md, page.md#anchor) becomes a :ref: to that label;
--   * a link to the README or to a file of the repository becomes the path in code (the site has neither);
--   * an image becomes a sentence naming its file under docs/ (the site copies no image);
--   * HTML comments (<!-- try -->, the test markers) are dropped.
-- The page's name is the metadata field `page`.

local PREFIX = 'ansible_collections.modelops.vllm.docsite.'
local page = nil
local first = true

local function label(anchor)
  if anchor == nil or anchor == '' then
    return PREFIX .. page
  end
  return PREFIX .. page .. '.' .. anchor
end

local function rst_escape(text)
  return (text:gsub('([`<>\\])', '\\%1'))
end

function Meta(meta)
  page = pandoc.utils.stringify(meta.page)
end

function RawBlock(raw)
  if raw.format == 'html' and raw.text:match('^%s*<!%-%-.*%-%->%s*$') then
    return {}
  end
end

function RawInline(raw)
  if raw.format == 'html' and raw.text:match('^<!%-%-.*%-%->$') then
    return {}
  end
end

function Header(header)
  local name
  if first then
    name = label(nil)
    first = false
  else
    name = label(header.identifier)
  end
  header.identifier = ''
  return {pandoc.RawBlock('rst', '.. _' .. name .. ':'), header}
end

function Link(link)
  local target = link.target
  if target:match('^%a[%w+.-]*:') then
    return nil  -- http(s), mailto: as it is
  end
  local text = pandoc.utils.stringify(link.content)
  local file, anchor = target:match('^([^#]*)#?(.*)$')
  local other = file:match('^([%w_-]+)%.md$')
  if other and other ~= 'README' then
    local name = PREFIX .. other
    if anchor ~= '' then
      name = name .. '.' .. anchor
    end
    return pandoc.RawInline('rst', ':ref:`' .. rst_escape(text) .. ' <' .. name .. '>`')
  end
  if file == '' then
    return pandoc.RawInline('rst', ':ref:`' .. rst_escape(text) .. ' <' .. label(anchor) .. '>`')
  end
  -- README.md or a file of the repository: its path from the repository's root, in code.
  local path = file:gsub('^%.%./', ''):gsub('^%./', '')
  if not file:match('^%.%./') then
    path = 'docs/' .. path
  end
  if text == path or text == file then
    return pandoc.Code(path)
  end
  return {pandoc.Span(link.content), pandoc.Str(' ('), pandoc.Code(path), pandoc.Str(')')}
end

function Image(image)
  local text = pandoc.utils.stringify(image.caption)
  return {pandoc.Str(text .. ' (the picture '), pandoc.Code('docs/' .. image.src),
          pandoc.Str(' of the collection)')}
end

return {
  {Meta = Meta},
  {RawBlock = RawBlock, RawInline = RawInline, Header = Header, Link = Link, Image = Image},
}
