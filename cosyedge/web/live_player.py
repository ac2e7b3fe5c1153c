"""The live player of a generate tab: a small Web Audio script in the page (:data:`LIVE_PLAYER_JS`)
that reads a job's WAV stream (``GET /jobs/{id}/audio?token=...``) and plays each piece as it
arrives, so the first sentence plays while the rest is synthesized; the finished WAV then lands in
the tab's download player. Gradio's own streaming audio output was not used: it re-encodes every
chunk to AAC through an ffmpeg process, and ffmpeg is not part of the install."""

from __future__ import annotations

from cosyedge.service.jobs import Job

#: Rough speaking rates for the live player's first guess of a text's length (it buffers for the
#: rest): ~14 Latin characters or ~4 CJK characters per second of speech.
SECONDS_PER_CHAR, SECONDS_PER_CJK_CHAR = 1 / 14, 1 / 4


def expected_seconds(text: str) -> float:
    """A first guess of how long ``text`` takes to say (the player's buffering needs one)."""
    cjk = sum(1 for ch in text if "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af")
    return round(cjk * SECONDS_PER_CJK_CHAR + (len(text) - cjk) * SECONDS_PER_CHAR, 1)


def live_player(job: Job, text: str = "") -> str:
    """The value of the live player: the URL of the job's audio stream (read by ``LIVE_PLAYER_JS``),
    with ``expect``: a guess of the audio's length, from which the player works out how much to
    buffer when the audio comes slower than it plays."""
    token = job.stream.token if job.stream is not None else ""
    return f"/jobs/{job.id}/audio?token={token}&expect={expected_seconds(text)}"


#: The live player, run by the page: fetch the job's WAV stream and schedule each piece on a Web
#: Audio clock as it arrives; a new value on any tab's player (the next job, or Cancel's empty value)
#: stops what the page still had scheduled: synthesis runs far ahead of playback, so a finished job
#: can have minutes of audio still to play.
#: An <audio> element was tried first: Chromium buffered ~2.4 s of audio before starting, which
#: threw most of the gain away.
LIVE_PLAYER_JS = """
// One state for the page's three players (window.__cosyedgeLive): a new value on any of them (the
// next job on any tab, or Cancel's empty value) silences what any of them still had scheduled.
const STOP = '#';  // Cancel's or a lesson's value (#stop-, #lesson-): new each time, so it reaches play() even on an idle player
const S = window.__cosyedgeLive || (window.__cosyedgeLive =
  {ctx: null, reader: null, sources: new Set(), turn: 0, owner: null});
async function play(src) {
  const mine = ++S.turn;  // the newest play() call; an older one still awaiting something gives up
  if (S.reader) { try { await S.reader.cancel(); } catch (e) {} S.reader = null; }
  if (mine !== S.turn) return;
  for (const node of S.sources) { try { node.stop(); } catch (e) {} }
  S.sources.clear();
  if (S.owner && S.owner !== element) S.owner.dataset.state = 'idle';
  S.owner = element;
  element.dataset.scheduled = '0';
  if (!src || src.startsWith(STOP)) src = '';  // Cancel: silence only
  element.dataset.state = src ? 'loading' : 'idle';
  if (!src) return;
  S.ctx = S.ctx || new (window.AudioContext || window.webkitAudioContext)();
  const ctx = S.ctx;
  if (ctx.state === 'suspended') { try { await ctx.resume(); } catch (e) {} }
  if (mine !== S.turn) return;
  let response;
  try { response = await fetch(src, {cache: 'no-store'}); } catch (e) { element.dataset.state = 'error'; return; }
  if (mine !== S.turn) { try { await response.body?.cancel(); } catch (e) {} return; }
  if (!response.ok || !response.body) { element.dataset.state = 'error'; return; }
  const r = response.body.getReader();
  S.reader = r;
  // Buffering: audio that comes slower than it plays is held until what is buffered lasts until the
  // rest arrives, at the rate measured so far: buffer >= rest * (1 - rate) / rate. The rest is the
  // expected length (from the text, ?expect=) minus what came; the rate is audio seconds per second,
  // between the first piece and the latest once they are 0.25 s apart, before that since the request
  // (one hop often comes in several reads a few ms apart: their "rate" would say no buffering).
  const expect = parseFloat(new URL(src, location.href).searchParams.get('expect') || '0');
  const label = element.querySelector('.cosyedge-live small');
  const asked = performance.now() / 1000;
  let rate = 0, carry = new Uint8Array(0), next = 0, scheduled = 0;
  let received = 0, firstAt = 0, firstLen = 0, pending = [], started = false;
  const measured = () => {
    const now = performance.now() / 1000;
    if (received > firstLen && now - firstAt >= 0.25) return (received - firstLen) / (now - firstAt);
    return received / Math.max(1e-3, now - asked);
  };
  const needed = () => {
    const speed = measured(), rest = Math.max(0, expect - received);
    return speed >= 1 ? 0 : rest * (1 - speed) / Math.max(speed, 1e-3);
  };
  const startPending = () => {
    for (const buffer of pending) {
      const node = ctx.createBufferSource();
      node.buffer = buffer;
      node.connect(ctx.destination);
      node.onended = () => S.sources.delete(node);
      S.sources.add(node);
      next = Math.max(next, ctx.currentTime + 0.05);
      node.start(next);
      next += buffer.duration;
      scheduled += buffer.duration;
    }
    pending = [];
    element.dataset.scheduled = scheduled.toFixed(3);
    element.dataset.state = 'playing';
    if (label) label.textContent = 'Playing while it is made / 边合成边播放';
  };
  while (true) {
    let chunk;
    try { chunk = await r.read(); } catch (e) { break; }
    if (chunk.done) break;
    if (mine !== S.turn) { try { await r.cancel(); } catch (e) {} return; }
    let bytes = new Uint8Array(carry.length + chunk.value.length);
    bytes.set(carry); bytes.set(chunk.value, carry.length);
    if (!rate) {
      if (bytes.length < 44) { carry = bytes; continue; }
      rate = new DataView(bytes.buffer, bytes.byteOffset, 44).getUint32(24, true);
      bytes = bytes.slice(44);
    }
    const usable = bytes.length - (bytes.length % 2);
    carry = bytes.slice(usable);
    if (!usable) continue;
    const pcm = new Int16Array(bytes.slice(0, usable).buffer);
    const buffer = ctx.createBuffer(1, pcm.length, rate);
    const samples = buffer.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
    if (!firstAt) { firstAt = performance.now() / 1000; firstLen = buffer.duration; }
    received += buffer.duration;
    pending.push(buffer);
    // Ran dry while playing (the guess was short): buffer again, by the same rule.
    if (started && next < ctx.currentTime) started = false;
    const ahead = pending.reduce((sum, b) => sum + b.duration, 0) + Math.max(0, next - ctx.currentTime);
    const want = needed();
    if (!started && ahead < want) {
      element.dataset.state = 'buffering';
      element.dataset.buffering = want.toFixed(1);
      if (label) label.textContent = `buffering ${want.toFixed(1)} s / 缓冲中`;
      continue;
    }
    started = true;
    startPending();
  }
  if (mine === S.turn && pending.length) startPending();  // the end came while buffering
  if (S.reader === r) { S.reader = null; element.dataset.state = 'done'; }
}
watch('value', () => play(props.value));
if (props.value) play(props.value);
"""
#: The live player's value for "stop" (Cancel), followed by a number that makes each one new.
LIVE_STOP = "#stop-"
#: Its value while a lesson is read: silence, and say that a lesson plays only once it is whole (it
#: is not streamed: its WAV lands in the download player at the end).
LIVE_LESSON = "#lesson-"
LESSON_PLAYS_AT_END = ("A lesson plays once it is all made: its WAV lands in the player below / "
                       "课文全部合成后才播放：WAV 会出现在下方播放器中")
LIVE_PLAYER_HTML = ('<div class="cosyedge-live"><small>${value && value.startsWith("' + LIVE_LESSON + '") ? "'
                    + LESSON_PLAYS_AT_END + '" : value && !value.startsWith("#") ? "Playing while it is made / "'
                    ' + "边合成边播放" : ""}</small></div>')
