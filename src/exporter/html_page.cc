// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "exporter/html_page.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace trainprof::exporter::html {

const char* const kPalette[10] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                  "#edc948", "#b07aa1", "#9c755f", "#ff9da7", "#bab0ac"};

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

std::string ms(double us) {
  double abs_ms = std::fabs(us) / 1000;
  return fixed(us / 1000, abs_ms >= 1000 ? 0 : abs_ms >= 100 ? 1 : abs_ms >= 10 ? 2 : 3);
}

double number(const std::string& cell) {
  const char* begin = cell.c_str();
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  return end == begin || !std::isfinite(v) ? 0 : v;
}

int column(const CsvRows& rows, const std::string& name) {
  if (rows.empty()) return -1;
  auto it = std::find(rows[0].begin(), rows[0].end(), name);
  return it == rows[0].end() ? -1 : static_cast<int>(it - rows[0].begin());
}

const std::string& cell(const std::vector<std::string>& row, int index) {
  static const std::string kNone;
  return index >= 0 && static_cast<size_t>(index) < row.size() ? row[static_cast<size_t>(index)] : kNone;
}

namespace {

bool ends_with(const std::string& text, std::string_view tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// A timestamp column: realtime µs, shown relative to an origin.
bool is_timestamp(const std::string& header) {
  return header == "Start Time(us)" || header == "Timestamp(us)" || header == "Peak Time(us)" ||
         header == "Allocation Time(us)" || header == "Release Time(us)";
}

// How one column is shown.
enum class Shown { kAsIs, kMs, kMsFromOrigin };

Shown shown_as(const std::string& header, size_t index, const TableView& view) {
  if (view.all_us && index > 0) return Shown::kMs;
  if (!view.us_as_ms || !ends_with(header, "(us)")) return Shown::kAsIs;
  return is_timestamp(header) ? Shown::kMsFromOrigin : Shown::kMs;
}

// "Total Time(us)" -> "Total Time (ms)"; a timestamp names its origin.
std::string shown_header(const std::string& header, Shown how, const TableView& view) {
  if (how == Shown::kAsIs) return header;
  std::string base = ends_with(header, "(us)") ? header.substr(0, header.size() - 4) : header;
  while (!base.empty() && base.back() == ' ') base.pop_back();
  if (how == Shown::kMs) return base + " (ms)";
  return base + " (ms from " + (view.step_origins.empty() ? view.origin_name : "step start") + ")";
}

bool is_number(const std::string& text) {
  if (text.empty()) return true;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

double origin_of(const std::vector<std::string>& row, const TableView& view) {
  if (view.step_origins.empty()) return view.origin_us;
  const std::string& step = row.empty() ? std::string() : row[0];
  for (const auto& [name, origin] : view.step_origins) {
    if (name == step) return origin;
  }
  return view.origin_us;
}

}  // namespace

std::string table(const CsvRows& rows, const std::string& css_class, const TableView& view) {
  if (rows.empty()) return "";
  std::vector<Shown> how;
  std::string out = "<div class=\"table-box\"><table class=\"" + css_class + " sortable\"><thead><tr>";
  for (const std::string& h : rows[0]) {
    how.push_back(shown_as(h, how.size(), view));
    std::string shown = shown_header(h, how.back(), view);
    // A column whose first row holds text is aligned left, its header too.
    size_t c = how.size() - 1;
    bool text = c > 0 && rows.size() > 1 && c < rows[1].size() && !is_number(rows[1][c]);
    out += std::string(text ? "<th class=\"t\"" : "<th") +
           (shown == h ? ">" + escape(h) : " data-csv=\"" + escape(h) + "\">" + escape(shown)) + "</th>";
  }
  out += "</tr></thead><tbody>\n";
  size_t shown_rows = 0;
  for (size_t r = 1; r < rows.size() && shown_rows < view.limit; ++r, ++shown_rows) {
    out += "<tr>";
    double origin = origin_of(rows[r], view);
    for (size_t c = 0; c < rows[r].size(); ++c) {
      const std::string& text = rows[r][c];
      Shown h = c < how.size() ? how[c] : Shown::kAsIs;
      if (h == Shown::kAsIs || text.empty()) {
        out += (is_number(text) ? "<td>" : "<td class=\"t\">") + escape(text) + "</td>";
        continue;
      }
      double us = number(text) - (h == Shown::kMsFromOrigin ? origin : 0);
      out += "<td data-v=\"" + escape(text) + "\">" + ms(us) + "</td>";
    }
    out += "</tr>\n";
  }
  out += "</tbody></table></div>\n";
  if (rows.size() - 1 > shown_rows) {
    out += "<p class=\"note\">The first " + std::to_string(shown_rows) + " of " +
           std::to_string(rows.size() - 1) + " rows" +
           (view.file.empty() ? "" : "; every row: " + view.file) + ".</p>\n";
  }
  return out;
}

namespace {

const char* kStyle =
    ":root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#f6f8fa}"
    "*{box-sizing:border-box}"
    "body{font:14px/1.45 system-ui,sans-serif;margin:0;background:var(--bg);color:var(--fg)}"
    "header.top{background:#24292f;color:#fff;padding:10px 24px}header.top h1{margin:0;font-size:18px}"
    "header.top .meta{color:#c9d1d9;margin:2px 0 0}"
    "main{max-width:1400px;margin:0 auto;padding:12px 24px 48px}"
    "h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}"
    "h3{font-size:15px;margin:18px 0 6px}"
    ".overview{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:14px}"
    "@media (max-width:1000px){.overview{grid-template-columns:1fr}}"
    ".card{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:0}"
    ".card h3{margin:2px 0 8px}"
    "svg.chart{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif}"
    ".axis{fill:#59636e;font-size:10px}.grid{stroke:#e5e8eb}"
    ".legend,.note,.meta{color:var(--muted)}.legend span.key{display:inline-block;width:10px;height:10px;"
    "margin:0 4px 0 10px;border-radius:2px;vertical-align:middle}"
    ".table-box{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums;background:#fff}"
    "td,th{border:1px solid #e1e4e8;padding:2px 6px;text-align:right;white-space:nowrap}"
    "td:first-child,th:first-child,td.t,th.t{text-align:left}th{background:#f0f2f4;cursor:pointer;position:"
    "sticky;top:0}"
    "th[data-up='1']::after{content:' \\25B2'}th[data-up='0']::after{content:' \\25BC'}"
    ".pager{display:flex;gap:8px;align-items:center;flex-wrap:wrap;margin:4px 0;color:var(--muted)}"
    ".pager input{padding:3px 6px;border:1px solid var(--line);border-radius:4px;min-width:14em}"
    "button{font:inherit;padding:2px 10px;border:1px solid var(--line);border-radius:4px;background:#fff;"
    "cursor:pointer}"
    "ol.findings{list-style:none;padding:0;margin:0}ol.findings li{margin:0 0 10px}"
    ".finding-head{display:flex;justify-content:space-between;gap:8px;flex-wrap:wrap}"
    ".saving{color:#1a7f37;font-weight:600;white-space:nowrap}"
    ".bar{height:10px;background:#eaeef2;border-radius:5px;overflow:hidden;margin:3px 0}"
    ".bar>span{display:block;height:100%;background:#2da44e}"
    "ol.findings details{color:var(--muted)}"
    ".trace-link{margin:6px 0}.trace-link code{background:#eaeef2;padding:1px 4px;border-radius:3px;"
    "word-break:break-all}"
    ".big{font-size:22px;font-weight:600}.kpis{display:flex;gap:28px;flex-wrap:wrap;margin:4px 0 8px}"
    ".kpis div{min-width:8em}.kpis .label{color:var(--muted);font-size:12px}"
    "pre{background:#fff;border:1px solid var(--line);padding:8px;overflow-x:auto;white-space:pre-wrap}"
    ".ranks{display:flex;flex-wrap:wrap;gap:4px;margin:6px 0}.ranks span{padding:2px 8px;border-radius:4px;"
    "font-weight:600}.ranks .inside{background:#fff1b8}.ranks .missing{background:#e15759;color:#fff}"
    "g.node{cursor:pointer}g.node:hover rect{stroke:#000}";

// Tables: sort on a header's click (numbers as numbers, data-v before the
// shown text; a second click reverses), filter and pages above 25 rows;
// #sort=<table class>:<column>[:desc] sorts on load. Icicles: a click zooms
// into a frame, its ancestors spanning the width. The heat maps' metric
// choice. The Perfetto button: the UI in a new tab, fed the embedded trace
// once it answers PONG (Perfetto's documented handshake; after 30 s without
// an answer, or for a trace not embedded, the note says to choose the file).
const char* kScript = R"JS(
(function(){
function val(td){return td.hasAttribute('data-v')?td.getAttribute('data-v'):td.textContent;}
document.querySelectorAll('div.table-box').forEach(function(box){
  var t=box.querySelector('table'),b=t.tBodies[0],size=25,page=0,filter='';
  function rows(){return Array.prototype.slice.call(b.rows);}
  var pager=null,info=null;
  function show(){
    var match=rows().filter(function(r){var k=!filter||r.textContent.toLowerCase().indexOf(filter)>=0;
      r.hidden=true;return k;});
    var pages=Math.max(1,Math.ceil(match.length/size));page=Math.min(page,pages-1);
    match.forEach(function(r,i){r.hidden=pager!==null&&(i<page*size||i>=(page+1)*size);});
    if(info)info.textContent=match.length?('rows '+(page*size+1)+'-'+Math.min(match.length,(page+1)*size)+
      ' of '+match.length):'no row matches';
  }
  if(b.rows.length>size){
    pager=document.createElement('div');pager.className='pager';
    var input=document.createElement('input');input.type='search';input.placeholder='filter rows';
    input.addEventListener('input',function(){filter=input.value.toLowerCase();page=0;show();});
    var prev=document.createElement('button');prev.textContent='previous';
    prev.addEventListener('click',function(){if(page>0){page--;show();}});
    var next=document.createElement('button');next.textContent='next';
    next.addEventListener('click',function(){page++;show();});
    var all=document.createElement('button');all.textContent='all rows';
    all.addEventListener('click',function(){size=size===25?1e9:25;all.textContent=size===25?'all rows':'pages';
      page=0;show();});
    info=document.createElement('span');
    pager.append(input,prev,next,all,info);box.parentNode.insertBefore(pager,box);
  }
  t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
    var up=th.dataset.up!=='1';t.querySelectorAll('th').forEach(function(o){delete o.dataset.up;});
    th.dataset.up=up?'1':'0';
    var list=rows();list.sort(function(x,y){var p=val(x.cells[i]||x),q=val(y.cells[i]||y),
      a=parseFloat(p),c=parseFloat(q),r=(isNaN(a)||isNaN(c))?p.localeCompare(q):a-c;return up?r:-r;});
    list.forEach(function(r){b.appendChild(r);});page=0;show();});});
  show();
});
var m=/#sort=([\w-]+):(\d+)(:desc)?/.exec(location.hash);
if(m){var th=document.querySelector('table.'+m[1]+' th:nth-child('+(+m[2]+1)+')');
  if(th){th.click();if(m[3])th.click();}}
document.querySelectorAll('svg.icicle').forEach(function(svg){
  var W=+svg.dataset.width,at=[0,W,0];
  function zoom(x0,w0,depth){at=[x0,w0,depth];var px=svg.getBoundingClientRect().width/W;
    svg.querySelectorAll('g.node').forEach(function(g){
    var x=+g.dataset.x,w=+g.dataset.w,d=+g.dataset.depth,nx,nw;
    if(d<depth&&x<=x0+1e-9&&x+w>=x0+w0-1e-9){nx=0;nw=W;}
    else{nx=(x-x0)/w0*W;nw=w/w0*W;}
    var hide=nw*px<0.3||nx>=W||nx+nw<=0||(d<depth&&nw<W);
    g.style.display=hide?'none':'';if(hide)return;
    var r=g.querySelector('rect'),t=g.querySelector('text');r.setAttribute('x',nx/10+'%');
    r.setAttribute('width',nw/10+'%');
    if(t){t.setAttribute('x',nx/10+'%');var n=Math.floor((nw*px-6)/6.5),s=g.dataset.name;
      t.textContent=n<3?'':(s.length>n?s.slice(0,n-1)+'\u2026':s);}});}
  svg.addEventListener('click',function(e){var g=e.target.closest('g.node');if(!g)return;
    zoom(+g.dataset.x,Math.max(+g.dataset.w,1e-9),+g.dataset.depth);});
  window.addEventListener('resize',function(){zoom(at[0],at[1],at[2]);});
  zoom(0,W,0);
});
document.querySelectorAll('select.heat-metric').forEach(function(s){s.addEventListener('change',function(){
  s.closest('section').querySelectorAll('svg.heat-map').forEach(function(h){
    h.style.display=h.dataset.metric===s.value?'':'none';});});});
document.querySelectorAll('button.open-perfetto').forEach(function(button){
  if(!navigator.onLine){button.disabled=true;button.title='offline: open the file below in the Perfetto UI '+
    'when online';}
  button.addEventListener('click',function(){
    var data=document.getElementById(button.dataset.trace);
    if(!data){button.nextElementSibling.hidden=false;window.open('https://ui.perfetto.dev/#!/');return;}
    var raw=atob(data.textContent.trim()),bytes=new Uint8Array(raw.length);
    for(var i=0;i<raw.length;i++)bytes[i]=raw.charCodeAt(i);
    var ui=window.open('https://ui.perfetto.dev/#!/');if(!ui)return;
    var tries=0,timer=setInterval(function(){ui.postMessage('PING','https://ui.perfetto.dev');
      if(++tries>300){clearInterval(timer);button.nextElementSibling.hidden=false;}},100);
    window.addEventListener('message',function on(e){if(e.data!=='PONG')return;clearInterval(timer);
      window.removeEventListener('message',on);
      ui.postMessage({perfetto:{buffer:bytes.buffer,title:button.dataset.title,fileName:'trace_view.pftrace'}},
        'https://ui.perfetto.dev');});
  });
});
})();
)JS";

}  // namespace

std::string page(const std::string& title, const std::string& body) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>trainprof report: " +
         escape(title) + "</title><style>" + kStyle + "</style></head><body>\n" + body + "<script>" +
         kScript + "</script>\n</body></html>\n";
}

std::string base64(std::string_view bytes) {
  static const char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                 static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                 static_cast<unsigned char>(bytes[i + 2]);
    out += kDigits[v >> 18 & 63];
    out += kDigits[v >> 12 & 63];
    out += kDigits[v >> 6 & 63];
    out += kDigits[v & 63];
  }
  if (size_t left = bytes.size() - i; left > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (left == 2) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kDigits[v >> 18 & 63];
    out += kDigits[v >> 12 & 63];
    out += left == 2 ? kDigits[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace trainprof::exporter::html
