// The demo's JavaScript-rendered listing (/js/search): fetches /api/jobs and builds the same markup
// as the server-rendered cards (crawlherd.demo.pages.card), with DOM calls (never innerHTML), then
// marks the list done (data-state="done").
(function () {
  var params = new URLSearchParams(window.location.search);
  var api = '/api/jobs?' + new URLSearchParams({q: params.get('q') || '', l: params.get('l') || ''});
  var results = document.getElementById('results');
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  fetch(api).then(function (r) { return r.json(); }).then(function (data) {
    data.items.forEach(function (job) {
      var card = el('article', 'job-card');
      card.setAttribute('data-id', String(job.id));
      var h2 = el('h2', 'title');
      var a = el('a', 'job-link', job.title);
      a.setAttribute('href', job.url);
      h2.appendChild(a);
      card.appendChild(h2);
      card.appendChild(el('span', 'company', job.company));
      card.appendChild(document.createTextNode(' '));
      card.appendChild(el('span', 'location', job.location));
      card.appendChild(document.createTextNode(' '));
      card.appendChild(el('span', 'salary', job.salary));
      results.appendChild(card);
    });
    results.setAttribute('data-state', 'done');
  }).catch(function (err) {
    results.setAttribute('data-state', 'error');
    results.textContent = 'Could not load jobs: ' + err;
  });
})();
